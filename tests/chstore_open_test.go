package tests

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// TestOpenWaitsForClickHouse: a loader started before ClickHouse answers
// waits for it instead of exiting; an error the server returns (a wrong
// password) is not retried.
func TestOpenWaitsForClickHouse(t *testing.T) {
	st := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A port where nothing listens yet; a proxy to ClickHouse opens on it
	// after the first failed attempts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var retries atomic.Int32
	go func() {
		for retries.Load() < 2 && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
		proxy, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("proxy: %v", err)
			return
		}
		defer proxy.Close()
		go func() { <-ctx.Done(); proxy.Close() }()
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", st.ClickHouseAddr)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, c) //nolint:errcheck // ends with the connection
				io.Copy(c, up)    //nolint:errcheck // ends with the connection
			}()
		}
	}()
	store, err := chstore.OpenWait(ctx, chstore.Options{Addr: addr, Database: "e2e_openwait_" + randSuffix()},
		func(err error, wait time.Duration) { retries.Add(1) })
	if err != nil {
		t.Fatalf("OpenWait: %v after %d retries", err, retries.Load())
	}
	defer store.Close()
	if retries.Load() < 2 {
		t.Errorf("%d retries, want >= 2 before the proxy opened", retries.Load())
	}
	if err := store.Conn().Exec(ctx, "DROP DATABASE IF EXISTS "+store.Database()); err != nil {
		t.Error(err)
	}

	// The server answers "wrong password": no retry.
	var again atomic.Int32
	_, err = chstore.OpenWait(ctx, chstore.Options{Addr: st.ClickHouseAddr, Username: "default", Password: "wrong-" + randSuffix()},
		func(error, time.Duration) { again.Add(1) })
	if err == nil || again.Load() != 0 {
		t.Fatalf("wrong password: err %v after %d retries, want an error and no retry", err, again.Load())
	}
}
