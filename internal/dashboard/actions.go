package dashboard

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
)

// maxInputBytes caps a run input typed into the dashboard.
const maxInputBytes = 1 << 20

// actionsOff answers an action when the dashboard runs without --ui-actions, or when the
// request did not come from the dashboard's own form.
func (s *Dashboard) actionsOff(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Actions {
		return !s.guard.checkPost(w, r)
	}
	why := "this dashboard is read-only (start it with --ui-actions to allow starting runs and deprecating workers)"
	s.log.Warn("dashboard action refused", "path", r.URL.Path, "reason", why, "remote", r.RemoteAddr)
	writeNotice(w, s.base, notice{Status: http.StatusForbidden, Title: "Refused", Message: "Refused: " + why + "."})
	return true
}

// startRun starts a run of a flow with the JSON input of the form, then shows the run.
func (s *Dashboard) startRun(w http.ResponseWriter, r *http.Request) {
	if s.actionsOff(w, r) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxInputBytes+64*1024)
	flow := r.PostFormValue("flow")
	input := strings.TrimSpace(r.PostFormValue("input"))
	if input == "" {
		input = "{}"
	}
	refuse := func(why string) {
		s.log.Warn("dashboard action refused", "action", "start_run", "flow", flow, "path", r.URL.Path, "reason", why, "remote", r.RemoteAddr)
		s.renderFlows(w, r, &startForm{Flow: flow, Input: input, Error: why})
	}
	switch {
	case len(input) > maxInputBytes:
		refuse("the input is over 1 MiB")
		return
	case !json.Valid([]byte(input)):
		var v any
		err := json.Unmarshal([]byte(input), &v)
		refuse("the input is not valid JSON: " + err.Error())
		return
	}
	id, err := store.Start(r.Context(), s.store.Pool(), flow, json.RawMessage(input))
	if err != nil {
		refuse(err.Error())
		return
	}
	s.log.Info("dashboard action: started a run", "action", "start_run", "flow", flow, "run_id", id,
		"input_bytes", len(input), "remote", r.RemoteAddr)
	http.Redirect(w, r, s.path("/runs/"+id), http.StatusSeeOther)
}

// deprecateWorker marks a worker deprecated: it finishes its running tasks and takes no more.
func (s *Dashboard) deprecateWorker(w http.ResponseWriter, r *http.Request) {
	if s.actionsOff(w, r) {
		return
	}
	id := r.PostFormValue("worker_id")
	changed, err := s.store.Deprecate(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		s.actionFailed(w, r, "no worker "+strconv.Quote(id)+" in this database")
		return
	}
	if err != nil {
		s.actionFailed(w, r, err.Error())
		return
	}
	if changed {
		s.log.Info("dashboard action: deprecated a worker", "action", "deprecate_worker", "worker_id", id, "remote", r.RemoteAddr)
	}
	http.Redirect(w, r, s.path("/workers"), http.StatusSeeOther)
}

// actionFailed explains a refused deprecation, with the way back.
func (s *Dashboard) actionFailed(w http.ResponseWriter, r *http.Request, why string) {
	s.log.Warn("dashboard action refused", "action", "deprecate_worker", "path", r.URL.Path, "reason", why, "remote", r.RemoteAddr)
	writeNotice(w, s.base, notice{Status: http.StatusBadRequest, Title: "Refused", Message: why, Back: "/workers", BackText: "Back to the workers"})
}
