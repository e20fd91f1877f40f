package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/procctl"
	"github.com/pgflow-wasm/pgflow-wasm/internal/runctl"
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
	why := "this dashboard is read-only (start it with --ui-actions to allow starting, cancelling and rerunning runs, and draining and deprecating workers)"
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
		s.actionFailed(w, r, "deprecate_worker", "no worker "+strconv.Quote(id)+" in this database", "/workers")
		return
	}
	if err != nil {
		s.actionFailed(w, r, "deprecate_worker", err.Error(), "/workers")
		return
	}
	if changed {
		s.log.Info("dashboard action: deprecated a worker", "action", "deprecate_worker", "worker_id", id, "remote", r.RemoteAddr)
	}
	http.Redirect(w, r, s.path("/workers"), http.StatusSeeOther)
}

// actionFailed explains a refused action, with the way back to the page it came from.
func (s *Dashboard) actionFailed(w http.ResponseWriter, r *http.Request, action, why, back string) {
	s.log.Warn("dashboard action refused", "action", action, "path", r.URL.Path, "reason", why, "remote", r.RemoteAddr)
	text := "Back to the workers"
	if strings.HasPrefix(back, "/runs") {
		text = "Back to the run"
	}
	writeNotice(w, s.base, notice{Status: http.StatusBadRequest, Title: "Refused", Message: why, Back: back, BackText: text})
}

// actor is who a dashboard action is recorded as in pgflow_wasm.operator_actions: the
// dashboard and the address the request came from (with a token, whoever holds it).
func actor(r *http.Request) string { return "dashboard " + r.RemoteAddr }

// formRun reads the run id of a run action's form; "" (the action refused) when it is none.
func (s *Dashboard) formRun(w http.ResponseWriter, r *http.Request, action string) string {
	id, err := store.ParseRunID(r.PostFormValue("run_id"))
	if err != nil {
		s.actionFailed(w, r, action, err.Error(), "/runs")
		return ""
	}
	return id
}

// cancelRun cancels a running run as `pgflow-wasm cancel` does, audited, then shows it.
func (s *Dashboard) cancelRun(w http.ResponseWriter, r *http.Request) {
	if s.actionsOff(w, r) {
		return
	}
	id := s.formRun(w, r, "cancel_run")
	if id == "" {
		return
	}
	res, err := runctl.Cancel(r.Context(), s.store.Pool(), id, actor(r), strings.TrimSpace(r.PostFormValue("reason")))
	if err != nil {
		s.actionFailed(w, r, "cancel_run", err.Error(), "/runs/"+id)
		return
	}
	s.log.Info("dashboard action: cancelled a run", "action", "cancel_run", "run_id", id, "flow", res.Flow, "tasks", res.Tasks, "remote", r.RemoteAddr)
	http.Redirect(w, r, s.path("/runs/"+id), http.StatusSeeOther)
}

// rerunRun starts a new run with a run's flow and input as `pgflow-wasm rerun` does,
// audited and linked to the original, then shows the new run.
func (s *Dashboard) rerunRun(w http.ResponseWriter, r *http.Request) {
	if s.actionsOff(w, r) {
		return
	}
	id := s.formRun(w, r, "rerun_run")
	if id == "" {
		return
	}
	newID, err := runctl.Rerun(r.Context(), s.store.Pool(), id, actor(r))
	if err != nil {
		s.actionFailed(w, r, "rerun_run", err.Error(), "/runs/"+id)
		return
	}
	s.log.Info("dashboard action: reran a run", "action", "rerun_run", "run_id", id, "new_run_id", newID, "remote", r.RemoteAddr)
	http.Redirect(w, r, s.path("/runs/"+newID), http.StatusSeeOther)
}

// drainProcess and undrainProcess set and clear a worker process's drain flag as `pgflow-wasm
// worker drain|undrain` do, audited.
func (s *Dashboard) drainProcess(w http.ResponseWriter, r *http.Request) {
	s.setDrain(w, r, "drain_process", procctl.Drain)
}

func (s *Dashboard) undrainProcess(w http.ResponseWriter, r *http.Request) {
	s.setDrain(w, r, "undrain_process", procctl.Undrain)
}

func (s *Dashboard) setDrain(w http.ResponseWriter, r *http.Request, action string,
	set func(context.Context, *pgxpool.Pool, string, string) (procctl.Changed, error)) {
	if s.actionsOff(w, r) {
		return
	}
	res, err := set(r.Context(), s.store.Pool(), r.PostFormValue("process_id"), actor(r))
	if err != nil {
		s.actionFailed(w, r, action, err.Error(), "/workers")
		return
	}
	if res.Changed {
		s.log.Info("dashboard action: "+strings.TrimSuffix(action, "_process")+"ed a worker process", "action", action,
			"process_id", res.ProcessID, "host", res.Host, "remote", r.RemoteAddr)
	}
	http.Redirect(w, r, s.path("/workers")+"#p-"+res.ProcessID, http.StatusSeeOther)
}
