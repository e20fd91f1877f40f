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
			TasksPerSec: tps, Hop: Percentiles{P50: hop}, Latency: Percentiles{P50: 10 * hop}, DBCPU: -1}
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
	// a: throughput ratios 2, 3, 0.9 -> 2.00; hop ratios 0.8, 0.7, 1.1 -> 0.80 (and so the
	// runs' p50, ten hops); tasks/s 90, 150, 200 -> 150; p50 80, 140, 110 -> 110.
	for _, want := range []string{"medians of 3 rounds", "| a ", " 150 ", " 2.00 ", " 11.0 ", " 110.0 ", " 0.80 ", "| floor ", " 1.00 "} {
		if !strings.Contains(out, want) {
			t.Errorf("rounds table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "#") {
		t.Errorf("the medians table names rounds:\n%s", out)
	}
}

// Each pgmq layer has its own floor: a contender on the real pgmq is compared with the floor
// on the real pgmq of the same round, and named apart from the same contender on our layer.
func TestEachLayerIsComparedWithItsOwnFloor(t *testing.T) {
	t.Parallel()
	result := func(name, kind, layer string, tps float64) Result {
		return Result{Contender: name, Kind: kind, Shape: ShapeOneStep, Fsync: "on", Layer: layer, Round: 1, Tasks: 1000,
			TasksPerSec: tps, DBCPU: -1}
	}
	rep := &Report{Config: Config{Rounds: 2, Fsync: []string{"on"}, Shapes: []string{ShapeOneStep}}, Results: []Result{
		result("floor", KindFloor, LayerOurs, 100), result("a", KindWorker, LayerOurs, 200),
		result("floor", KindFloor, LayerReal, 50), result("a", KindWorker, LayerReal, 150),
	}}
	rep.fillRatios()
	if got := rep.Results[1].RatioToFloor; got != 2 {
		t.Errorf("our layer's ratio = %v, want 200/100", got)
	}
	if got := rep.Results[3].RatioToFloor; got != 3 {
		t.Errorf("the real pgmq's ratio = %v, want 150/50 (its own floor)", got)
	}
	var b strings.Builder
	rep.writeRounds(&b, "on", ShapeOneStep)
	for _, want := range []string{"| a ", "| real/a ", "| real/floor ", " 3.00 ", " 2.00 "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("rounds table lacks %q:\n%s", want, b.String())
		}
	}
}
