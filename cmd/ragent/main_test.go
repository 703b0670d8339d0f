package main

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// TestMain lets the test binary stand in for the ragent binary when the
// ingestion worker of an in-process instance starts its parser process
// (`<os.Executable()> parse`): without it the test binary would run every
// test again instead of parsing.
func TestMain(m *testing.M) {
	if len(os.Args) >= 2 && os.Args[1] == "parse" {
		if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "ragent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
