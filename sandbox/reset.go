package sandbox

import (
	"bytes"
	"slices"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero/api"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/instrument"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/internal/wasmfile"
)

// Every task runs in a fresh instance, but on wazero a fresh instance need not be a new one
// (docs/RATIONALE.md, "A fresh instance, or one made equal to it"): after a call that
// returned, an instance whose module can change nothing but its memory and its mutable
// globals (the instrumentation tells: instrument.ResettableExport) is made equal to a new
// instance by writing both back to what instantiation left, and serves the next task. A
// JavaScript handler's instantiation is most of its task (wazero fills a function table of
// hundreds of entries and grows a call stack anew each time); the memory is written either
// way. An instance whose memory grew, that trapped, ran out of time or exited is closed, as
// before.

// readyMax bounds the linear memory that reset instances hold between tasks, all modules
// together: past it an instance is closed and its memory goes back to the pool.
const readyMax = 64 << 20

// resetPlan is what resetting an instance of one compiled module writes. Its image is
// read from the module's first instance, before any of its code ran (the module has no
// start function): the memory's non-zero bytes and the globals' values.
type resetPlan struct {
	memSize uint64   // the memory's initial length (0: no memory); a grown one is not reset
	globals []string // the exports of the mutable globals

	once       sync.Once
	imageAt    *overwritten // the ranges of the memory's non-zero bytes, in order
	image      [][]byte     // the bytes of each of imageAt's ranges
	globalInit []uint64
}

// imageGap is the longest run of zeros an image range takes in rather than ending: a
// snapshot's heap has many short ones, and one copy is cheaper than many.
const imageGap = 4096

// resetPlanOf returns the plan for an instrumented module, or nil when its instances
// cannot be reset.
func resetPlanOf(wasm []byte) *resetPlan {
	m, err := wasmfile.Parse(wasm)
	if err != nil || len(m.Memories) > 1 || m.ImportedMemories() != 0 {
		return nil
	}
	if _, ok := m.Export(instrument.ResettableExport); !ok {
		return nil
	}
	p := &resetPlan{}
	if len(m.Memories) == 1 {
		p.memSize = m.Memories[0].Min * wasmfile.PageSize
	}
	for _, e := range m.Exports {
		if e.Kind == wasmfile.KindGlobal && strings.HasPrefix(e.Name, instrument.GlobalExportPrefix) {
			p.globals = append(p.globals, e.Name)
		}
	}
	return p
}

// capture reads the image from a new instance, once per module.
func (p *resetPlan) capture(mod api.Module, mem *cappedMemory) {
	p.once.Do(func() {
		for _, name := range p.globals {
			p.globalInit = append(p.globalInit, mod.ExportedGlobal(name).Get())
		}
		if mem == nil {
			return
		}
		b := mem.buf
		var ranges [][2]uint64
		for i := 0; i < len(b); {
			if b[i] == 0 {
				i++
				continue
			}
			start, end := i, i+1
			for j := end; j < len(b) && j-end <= imageGap; j++ {
				if b[j] != 0 {
					end = j + 1
				}
			}
			ranges = append(ranges, [2]uint64{uint64(start), uint64(end)})
			p.image = append(p.image, slices.Clone(b[start:end]))
			i = end
		}
		if len(ranges) > 0 {
			p.imageAt = &overwritten{ranges: ranges}
		}
	})
}

// restore writes the image back into mem, whose length is the initial one: zero outside the
// image's ranges (only the pages the guest touched, for a mapping) and the image inside.
func (p *resetPlan) restore(mem *cappedMemory) {
	b := mem.buf
	if mem.sparse {
		clearTouched(b, p.imageAt)
	} else {
		clearExcept(b, p.imageAt)
	}
	for i, src := range p.image {
		dst := b[p.imageAt.ranges[i][0]:p.imageAt.ranges[i][1]]
		// Most of a snapshot's pages are as the image has them after a task: comparing
		// reads, where copying would write them all.
		for at := 0; at < len(dst); at += comparePage {
			end := min(at+comparePage, len(dst))
			if !bytes.Equal(dst[at:end], src[at:end]) {
				copy(dst[at:end], src[at:end])
			}
		}
	}
}

const comparePage = 4096
