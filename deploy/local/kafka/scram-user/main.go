// Command scram-user creates or updates a SCRAM-SHA-512 user on Apache
// Kafka, for deploy/local/stack.sh: the secure stack's client user is made
// this way, over the broker's plaintext listener on 127.0.0.1, because the
// jar set the stack runs has no kafka-configs tool and Kafka's storage tool
// would take the password on its command line. The password is read from
// the file --password-file names, never from argv. Idempotent: run on
// every `up`, it sets the same password again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "", "a plaintext listener of the cluster (host:port, comma-separated)")
	user := flag.String("user", "", "the SCRAM user to create or update")
	file := flag.String("password-file", "", "file holding the user's password (one line)")
	flag.Parse()
	if err := run(*brokers, *user, *file); err != nil {
		fmt.Fprintf(os.Stderr, "scram-user: %v\n", err)
		os.Exit(1)
	}
}

func run(brokers, user, file string) error {
	if brokers == "" || user == "" || file == "" {
		return errors.New("--brokers, --user and --password-file are required")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--password-file: %w", err)
	}
	pass := strings.TrimRight(string(b), "\r\n")
	if pass == "" {
		return fmt.Errorf("--password-file %s is empty", file)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: user, Mechanism: kadm.ScramSha512, Iterations: 8192, Password: pass,
	}})
	if err != nil {
		return fmt.Errorf("alter SCRAM credentials of %s on %s: %w", user, brokers, err)
	}
	if err := res.Error(); err != nil {
		return fmt.Errorf("alter SCRAM credentials of %s on %s: %w", user, brokers, err)
	}
	return nil
}
