package agent

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// linkInto makes rel in box a hard link to the file at src (the cache's,
// which the agent alone may reach), through a descriptor of rel's
// directory: the link lands in the box whatever links the box holds.
func linkInto(box *os.Root, rel, src string) error {
	dir, err := box.Open(filepath.Dir(rel))
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := unix.Linkat(unix.AT_FDCWD, src, int(dir.Fd()), filepath.Base(rel), 0); err != nil {
		return &os.LinkError{Op: "link", Old: src, New: rel, Err: err}
	}
	return nil
}

// accessTime is when the file was last used, as cached marks it.
func accessTime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Atim.Sec, st.Atim.Nsec)
	}
	return fi.ModTime()
}
