package catalog

import (
	"errors"
	"io"
	"sync"

	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// providers makes each provider once, with its settings.
type providers struct {
	mu       sync.Mutex
	settings map[string]map[string]string
	made     map[string]provision.Provider
}

func (p *providers) get(name string) (provision.Provider, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr := p.made[name]; pr != nil {
		return pr, nil
	}
	pr, err := provision.New(name, p.settings[name])
	if err != nil {
		return nil, err
	}
	if p.made == nil {
		p.made = map[string]provision.Provider{}
	}
	p.made[name] = pr
	return pr, nil
}

// close closes the providers that hold connections.
func (p *providers) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, pr := range p.made {
		if c, ok := pr.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	p.made = nil
	return errors.Join(errs...)
}
