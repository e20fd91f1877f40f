package dashboard

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// searchLimit is how many runs the search page lists.
const searchLimit = 50

// searchView is the search page: the runs whose id begins with (or contains) the text, or
// whose input has the fields it names.
type searchView struct {
	Query  string
	Runs   []pgflowtype.Run
	More   bool
	Prefix bool
	Input  string // a search by input field: the JSON the runs' input contains
	Error  string // the text is no part of a run id, or no input query
}

// searchPage finds runs by their id or part of it, or by fields of their input
// (`input.customer = cus_42`), from the header's search box. One run found by its id is one
// the operator meant: its page opens at once.
func (s *Dashboard) searchPage(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	v := searchView{Query: q}
	var now time.Time
	var res store.SearchResult
	var err error
	if store.IsInputQuery(q) {
		var doc []byte
		if doc, err = store.ParseInputQuery(q); err == nil {
			v.Input = string(doc)
			res, err = s.store.SearchInput(r.Context(), doc, searchLimit)
		}
	} else {
		res, err = s.store.SearchRuns(r.Context(), q, searchLimit)
	}
	switch {
	case errors.Is(err, store.ErrBadSearch):
		v.Error = strings.TrimPrefix(err.Error(), store.ErrBadSearch.Error()+": ")
		if now, err = s.store.Now(r.Context()); err != nil {
			s.fail(w, r, err)
			return
		}
	case err != nil:
		s.fail(w, r, err)
		return
	case len(res.Runs) == 1 && !res.More && v.Input == "":
		http.Redirect(w, r, s.path("/runs/"+res.Runs[0].ID), http.StatusSeeOther)
		return
	default:
		v.Runs, v.More, v.Prefix, now = res.Runs, res.More, res.Prefix, res.Now
	}
	s.render(w, r, "search", view{Title: "Find a run", Nav: "runs", Now: now, Search: q, Data: v})
}
