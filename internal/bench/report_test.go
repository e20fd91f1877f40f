package bench

import (
	"strings"
	"testing"
)

// With rounds, each contender's ratio to the floor is taken within a round, then the median
// over rounds: a slow round slows the floor and the contender alike.
func TestRoundsReportTheMedianOfEachRoundsRatio(t *testing.T) {
	t.Parallel()
	result := func(name, kind string, round int, tps, hop float64) Result {
		return Result{Contender: name, Kind: kind, Shape: ShapeChain, Fsync: "on", Round: round, Tasks: 1000,
			TasksPerSec: tps, Hop: Percentiles{P50: hop}, DBCPU: -1}
	}
	rep := &Report{Config: Config{Rounds: 3, Fsync: []string{"on"}, Shapes: []string{ShapeChain}}, Results: []Result{
		result("floor", KindFloor, 1, 100, 10), result("a", KindWorker, 1, 200, 8),
		result("floor", KindFloor, 2, 50, 20), result("a", KindWorker, 2, 150, 14), // a slow round
		result("floor", KindFloor, 3, 100, 10), result("a", KindWorker, 3, 90, 11),
	}}
	rep.fillRatios()
	if got := rep.Results[3].RatioToFloor; got != 3 {
		t.Fatalf("round 2's throughput ratio = %v, want 150/50 = 3 (the floor of the same round)", got)
	}
	var b strings.Builder
	rep.writeRounds(&b, "on", ShapeChain)
	out := b.String()
	// a: throughput ratios 2, 3, 0.9 -> 2.00; hop ratios 0.8, 0.7, 1.1 -> 0.80; tasks/s 90, 150, 200 -> 150.
	for _, want := range []string{"medians of 3 rounds", "| a ", " 150 ", " 2.00 ", " 11.0 ", " 0.80 ", "| floor ", " 1.00 "} {
		if !strings.Contains(out, want) {
			t.Errorf("rounds table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "#") {
		t.Errorf("the medians table names rounds:\n%s", out)
	}
}
