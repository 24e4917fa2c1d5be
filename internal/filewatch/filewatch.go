// Package filewatch is the reload loop shared by the files a server
// re-reads without a restart (the API's tokens file, its TLS certificate
// and key): on a signal (SIGHUP), and on a poll that finds them changed.
package filewatch

import (
	"context"
	"os"
	"time"
)

// Run calls reload with why = "signal" for every value from signals and,
// when every > 0, with why = "changed" each time a poll every that long
// finds changed() true, until ctx is done. reload records what it read
// (so that changed() is false until the files change again) and logs its
// own outcome: a refused reload keeps what is in force.
func Run(ctx context.Context, every time.Duration, signals <-chan os.Signal, changed func() bool, reload func(why string)) {
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		why := "signal"
		select {
		case <-ctx.Done():
			return
		case <-signals:
		case <-tick:
			if !changed() {
				continue
			}
			why = "changed"
		}
		reload(why)
	}
}
