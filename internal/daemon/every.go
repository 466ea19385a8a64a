package daemon

import "time"

// every runs each every interval on a goroutine of its own until the daemon closes, then
// last (nil: nothing); the daemon's Close waits for it (closer name).
func (d *Daemon) every(name string, interval time.Duration, each, last func()) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				if last != nil {
					last()
				}
				return
			case <-t.C:
				each()
			}
		}
	}()
	d.addCloser(name, func() error { close(stop); <-done; return nil })
}
