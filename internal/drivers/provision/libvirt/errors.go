package libvirt

import (
	"errors"
	"net"
	"syscall"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// classify gives an error from libvirt (or from reaching it) its errdefs
// class, keeping its text: a missing domain, volume, pool or network is
// not found; a domain in the wrong state for a verb is a conflict; a
// daemon that cannot be reached is unavailable.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var class error
	var le golibvirt.Error
	var ne net.Error
	switch {
	case errors.As(err, &le):
		class = classOf(golibvirt.ErrorNumber(le.Code))
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ECONNRESET), errors.As(err, &ne):
		class = errdefs.ErrUnavailable
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		class = errdefs.ErrPermission
	}
	if class == nil {
		return err
	}
	return errdefs.Class(err, class)
}

func classOf(code golibvirt.ErrorNumber) error {
	switch code {
	case golibvirt.ErrNoDomain, golibvirt.ErrNoStorageVol, golibvirt.ErrNoStoragePool, golibvirt.ErrNoNetwork,
		golibvirt.ErrNoDomainMetadata:
		return errdefs.ErrNotFound
	case golibvirt.ErrOperationInvalid, golibvirt.ErrDomExist, golibvirt.ErrStorageVolExist, golibvirt.ErrResourceBusy:
		return errdefs.ErrConflict
	case golibvirt.ErrInvalidArg, golibvirt.ErrXMLError, golibvirt.ErrXMLDetail, golibvirt.ErrNoSupport,
		golibvirt.ErrArgumentUnsupported, golibvirt.ErrConfigUnsupported, golibvirt.ErrOperationUnsupported,
		golibvirt.ErrNoKernel, golibvirt.ErrNoSource, golibvirt.ErrXMLInvalidSchema, golibvirt.ErrCPUIncompatible:
		return errdefs.ErrInvalid
	case golibvirt.ErrAuthFailed, golibvirt.ErrAuthCancelled, golibvirt.ErrAuthUnavailable,
		golibvirt.ErrOperationDenied, golibvirt.ErrAccessDenied:
		return errdefs.ErrPermission
	case golibvirt.ErrNoConnect, golibvirt.ErrRPC, golibvirt.ErrOperationTimeout, golibvirt.ErrAgentUnresponsive,
		golibvirt.ErrSystemError:
		return errdefs.ErrUnavailable
	}
	return nil
}

// isCode reports whether err is a libvirt error with the code.
func isCode(err error, code golibvirt.ErrorNumber) bool {
	var le golibvirt.Error
	return errors.As(err, &le) && golibvirt.ErrorNumber(le.Code) == code
}
