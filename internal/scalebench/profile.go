package scalebench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"time"
)

// waitSampler is the part of the store profile samples.
type waitSampler interface {
	ActiveWaits(ctx context.Context) ([]string, error)
}

// profile runs fn; with dir set it records a Go CPU profile of the whole
// process meanwhile (dir/ingest-SIZE.pprof) and samples the database's
// wait events every 20 ms, storing the 15 most frequent in *waits as
// "share% event | statement".
func profile(ctx context.Context, db waitSampler, dir string, size int, waits *[]string, fn func() error) error {
	if dir == "" {
		return fn()
	}
	f, err := os.Create(filepath.Join(dir, "ingest-"+strconv.Itoa(size)+".pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	counts := map[string]int{}
	samples := 0
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
			active, err := db.ActiveWaits(sctx)
			if err != nil {
				continue // the run's own error, if any, is what matters
			}
			samples++
			for _, a := range active {
				counts[a]++
			}
		}
	}()
	err = fn()
	stop()
	<-done
	pprof.StopCPUProfile()
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b string) int { return counts[b] - counts[a] })
	for _, k := range keys[:min(15, len(keys))] {
		// Share of samples in which a session was in this state: the
		// average number of sessions in it, as a percentage.
		*waits = append(*waits, fmt.Sprintf("%5.1f%% %s", 100*float64(counts[k])/float64(max(1, samples)), k))
	}
	return err
}
