package flowfile_test

import (
	"fmt"

	"github.com/pgflow-wasm/pgflow-wasm/flowfile"
)

// A flows file is parsed strictly; steps come back in dependency order, options resolved.
func ExampleParse() {
	f, err := flowfile.Parse("flows.yaml", "/srv/app", []byte(`
flows:
  - slug: orders
    timeout: 30
    steps:
      - {slug: total, depends_on: [price], module: sum.wasm}
      - {slug: price, type: map, module: price.wasm, timeout: 5}
`))
	if err != nil {
		// The module files do not exist in this example: every such problem is reported.
		fmt.Println(err)
		return
	}
	fmt.Println(f.Flows[0].Slug)
	// Output:
	// flows.yaml:6: module "sum.wasm" not found (looked for /srv/app/sum.wasm; paths are relative to the flows file)
	// flows.yaml:7: module "price.wasm" not found (looked for /srv/app/price.wasm; paths are relative to the flows file)
}

// Steps are returned in dependency order whatever their order in the file.
func ExampleFlow_Dependents() {
	f, err := flowfile.Parse("flows.yaml", "/", []byte(`
flows:
  - slug: diamond
    steps:
      - {slug: d, depends_on: [b, c], module: /dev/null}
      - {slug: b, depends_on: [a], module: /dev/null}
      - {slug: c, depends_on: [a], module: /dev/null}
      - {slug: a, module: /dev/null}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fl := f.Flow("diamond")
	for _, s := range fl.Steps {
		fmt.Println(s.Slug, "->", fl.Dependents(s.Slug), "timeout", s.EffectiveTimeout(fl))
	}
	// Output:
	// a -> [b c] timeout 60
	// b -> [d] timeout 60
	// c -> [d] timeout 60
	// d -> [] timeout 60
}
