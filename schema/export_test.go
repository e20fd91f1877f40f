package schema

import "strings"

// LayerSQLWithoutMarker is the layer's first version minus its marker function: the body of
// the test fixture that stands in for a real pgmq (a pgmq-compatible API the installer must
// not recognize as ours).
func LayerSQLWithoutMarker() string {
	s := layerBaseSQL()
	start := strings.Index(s, "-- BEGIN marker")
	end := strings.Index(s, "-- END marker")
	return s[:start] + s[end+len("-- END marker"):]
}

// WithoutPgmqExtension exposes the CREATE EXTENSION skip for tests.
func (m *Migrations) WithoutPgmqExtension() (map[string]string, error) {
	return m.withoutExtensions([]string{"pgmq"})
}

// VersionAtLeast exposes the version comparison for tests.
func VersionAtLeast(v, min string) (bool, bool) { return versionAtLeast(v, min) }

// BaseLayerVersion exposes the layer version every install starts from.
const BaseLayerVersion = baseLayerVersion

// LayerBaseSQL exposes the layer at BaseLayerVersion, to make a database as a pgflow-wasm
// that shipped it would have.
func LayerBaseSQL() string { return layerBaseSQL() }
