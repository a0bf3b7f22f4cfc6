package tcprelay

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

const (
	// copyBufferSize is the read/write buffer: a loop reads into one for a
	// turn, and a connection whose peer cannot take a whole read keeps the
	// remainder in one until the peer drains.
	copyBufferSize = 32 << 10
	// pipeSize is what a splice pipe is grown to (F_SETPIPE_SZ).
	pipeSize = 1 << 20
)

// pools hold one Proxy's copy buffers and splice pipes. Nothing is held for
// an idle connection: loops take a buffer per turn, connections only while
// bytes wait for a slow peer.
type pools struct {
	bufs  sync.Pool // *[]byte of copyBufferSize
	pipes sync.Pool // *pipe, always empty
}

func newPools() *pools {
	p := &pools{}
	p.bufs.New = func() any {
		b := make([]byte, copyBufferSize)
		return &b
	}
	return p
}

func (ps *pools) getBuf() *[]byte  { return ps.bufs.Get().(*[]byte) }
func (ps *pools) putBuf(b *[]byte) { ps.bufs.Put(b) }

// pipe is a splice pipe. A pipe dropped from the pool is closed by its
// finalizer.
type pipe struct {
	r, w int
	size int
}

func (ps *pools) getPipe() (*pipe, error) {
	if p, ok := ps.pipes.Get().(*pipe); ok {
		return p, nil
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	p := &pipe{r: fds[0], w: fds[1], size: 64 << 10}
	// A larger pipe moves more per splice pair; keep the default on failure.
	if n, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, pipeSize); err == nil {
		p.size = n
	}
	runtime.SetFinalizer(p, (*pipe).close)
	return p, nil
}

// putPipe returns an empty pipe to the pool.
func (ps *pools) putPipe(p *pipe) { ps.pipes.Put(p) }

func (p *pipe) close() {
	runtime.SetFinalizer(p, nil)
	unix.Close(p.r)
	unix.Close(p.w)
}
