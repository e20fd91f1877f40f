// Package schema installs and inspects what pgflow-wasm needs in a PostgreSQL database:
// pgmq (the real extension when the server offers pgmq >= 1.5, else this project's
// pgmq-compatible layer, as an extension or a plain schema), realtime.send (a NOTIFY-based
// stand-in for Supabase Realtime) and pgflow's own migrations from the npm package
// @pgflow/core, applied unmodified and recorded in pgflow_wasm.schema_migrations.
//
// Install is safe to run again (it changes nothing the second time) and from several
// processes at once (an advisory lock serializes installers of one database).
package schema

import (
	_ "embed"
	"strings"
)

// LayerVersion is the pgmq version this project's layer reports: the pgmq API level it
// mirrors (1.5.0, the first with message headers) plus a build tag naming the layer.
const LayerVersion = "1.5.0+pgflow-wasm.2"

// baseLayerVersion is the layer's first version, whose script every install starts from:
// LayerVersion is it plus the update in sql/pgmq_layer_static.sql.
const baseLayerVersion = "1.5.0+pgflow-wasm.1"

// RealtimeVersion versions realtime.sql; an older copy of ours is replaced on install.
const RealtimeVersion = "3"

// LayerCommentPrefix starts the comment of our control file and of the marker function:
// whatever pgmq lacks it is a real (foreign) pgmq.
const LayerCommentPrefix = "pgflow-wasm layer:"

// realtimeCommentPrefix starts the comment on our realtime.send.
const realtimeCommentPrefix = "pgflow-wasm realtime.send"

// MinPgmqVersion is the oldest real pgmq pgflow 0.8.1 works with (message_record.headers).
const MinPgmqVersion = "1.5"

//go:embed sql/pgmq_layer.sql
var layerTemplate string

//go:embed sql/pgmq_layer_static.sql
var layerUpdateTemplate string

//go:embed sql/realtime.sql
var realtimeTemplate string

//go:embed sql/bookkeeping.sql
var bookkeepingSQL string

//go:embed sql/attempts.sql
var attemptsSQL string

// layerSQL is the whole pgmq layer at LayerVersion, the same in both install modes: the
// base script, then the update to LayerVersion.
func layerSQL() string {
	return layerBaseSQL() + "\n" + layerUpdateSQL()
}

// layerBaseSQL is the layer at baseLayerVersion.
func layerBaseSQL() string {
	return strings.ReplaceAll(layerTemplate, "{{LAYER_VERSION}}", baseLayerVersion)
}

// layerUpdateSQL takes a layer at baseLayerVersion to LayerVersion.
func layerUpdateSQL() string {
	return strings.ReplaceAll(layerUpdateTemplate, "{{LAYER_VERSION}}", LayerVersion)
}

func realtimeSQL() string {
	return strings.ReplaceAll(realtimeTemplate, "{{REALTIME_VERSION}}", RealtimeVersion)
}

// Fingerprint identifies the SQL this package installs (layer, realtime.send, bookkeeping,
// the runs index), so caches of installed databases (test templates) can tell when it changed.
func Fingerprint() string {
	return sha256Hex(LayerVersion + "\x00" + layerSQL() + "\x00" + realtimeSQL() + "\x00" + bookkeepingSQL + "\x00" + attemptsSQL + "\x00" + stepCompleteSQL + "\x00" + RunsIndexSQL + "\x00" + InputIndexSQL)
}
