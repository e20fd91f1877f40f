//go:build cgo

package sqlcap

import (
	"errors"
	"strings"
	"sync"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/pganalyze/pg_query_go/v6/parser"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Check refuses a statement the filter does not let through; nil when it may run. It
// parses the text with PostgreSQL's own parser (libpg_query) and reads the tree:
//
//   - exactly one statement, of a kind that reads or writes rows: SELECT, INSERT, UPDATE,
//     DELETE, MERGE (WITH, VALUES and TABLE parse to these); every other command (SET,
//     RESET, BEGIN, COPY, LISTEN, NOTIFY, DO, CALL, PREPARE, EXECUTE, EXPLAIN, CREATE,
//     LOCK, ...) is refused by its kind;
//   - no SELECT ... INTO, anywhere (it creates a table);
//   - no call of a refused function anywhere in the tree: in sub-selects, CTEs, FROM and
//     LATERAL, arguments, ORDER BY, type modifiers, ..., and in the attribute notation
//     t.f and (expr).f, which PostgreSQL also reads as the call f(t);
//   - no write into pg_catalog or information_schema, nor to an unqualified pg_* name
//     (resolved in pg_catalog first), and no mention of pg_settings in a statement that
//     writes (an UPDATE of that view runs set_config).
//
// The parser reads string constants as a server with standard_conforming_strings on,
// which every transaction of a handler sets; it is PostgreSQL 17's grammar, a superset of
// the server's for everything the filter looks at.
//
// A statement let through is remembered (see accepted): handlers run the same few
// statements, with parameters, task after task.
func Check(sql string) *Error {
	if accepted.has(sql) {
		return nil
	}
	e := check(sql)
	if e == nil {
		accepted.add(sql)
	}
	return e
}

// accepted holds statements Check let through; the verdict depends on the text alone.
// Parsing and walking a typical statement takes a few hundred microseconds, a look-up well
// under one. It is bounded by bytes, and emptied when full: the statements that matter
// come back at once.
var accepted = acceptedSet{m: map[string]struct{}{}}

const (
	acceptedMaxBytes = 4 << 20
	acceptedMaxText  = 16 << 10 // longer statements are parsed every time
)

type acceptedSet struct {
	mu    sync.RWMutex
	m     map[string]struct{}
	bytes int
}

func (a *acceptedSet) has(sql string) bool {
	a.mu.RLock()
	_, ok := a.m[sql]
	a.mu.RUnlock()
	return ok
}

func (a *acceptedSet) add(sql string) {
	if len(sql) > acceptedMaxText {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.m[sql]; ok {
		return
	}
	if a.bytes+len(sql) > acceptedMaxBytes {
		a.m, a.bytes = map[string]struct{}{}, 0
	}
	a.m[strings.Clone(sql)] = struct{}{}
	a.bytes += len(sql)
}

// check is Check without the memory of accepted statements.
func check(sql string) *Error {
	if e := nulByte(sql); e != nil {
		return e
	}
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return syntaxError(err)
	}
	switch len(tree.Stmts) {
	case 0:
		return refuse("the statement is empty")
	case 1:
	default:
		return refuse("one statement per call: the text has %d (send each statement in a call of its own)", len(tree.Stmts))
	}
	raw := tree.Stmts[0]
	if e := oneStatement(sql, raw); e != nil {
		return e
	}
	switch raw.Stmt.Node.(type) {
	case *pg_query.Node_SelectStmt, *pg_query.Node_InsertStmt, *pg_query.Node_UpdateStmt,
		*pg_query.Node_DeleteStmt, *pg_query.Node_MergeStmt:
	default:
		return refuse("%s statements are not allowed: a handler runs only SELECT, INSERT, UPDATE, DELETE, MERGE, "+
			"WITH, VALUES and TABLE (the step's role and its grants decide what they may touch)", commandWord(sql, raw))
	}
	var w walker
	if e := w.walk(raw.Stmt.ProtoReflect()); e != nil {
		return e
	}
	if w.writes && w.pgSettings {
		return refuse("a statement that writes may not mention pg_settings: an UPDATE of it changes settings " +
			"(a step runs with the settings the worker gave its task)")
	}
	return nil
}

// syntaxError is PostgreSQL's message, with the position (in characters, from 1) as the
// server gives it.
func syntaxError(err error) *Error {
	var pe *parser.Error
	if errors.As(err, &pe) {
		if pe.Cursorpos > 0 {
			return refuse("%s (position %d)", pe.Message, pe.Cursorpos)
		}
		return refuse("%s", pe.Message)
	}
	// The parse tree itself could not be read: in practice one nested deeper than the
	// protobuf decoder's limit (thousands of levels).
	return refuse("the statement could not be checked (%v): nest its expressions less deeply", err)
}

// oneStatement refuses empty statements around the one statement ("select 1;;",
// ";select 1"): the server would skip them, but a semicolon that goes on is more likely a
// second statement cut off than anything a handler means.
func oneStatement(sql string, raw *pg_query.RawStmt) *Error {
	start := int(raw.StmtLocation)
	end := len(sql)
	if raw.StmtLen > 0 {
		end = min(start+int(raw.StmtLen), len(sql))
	}
	// Around the statement there are only blanks, comments and semicolons; a semicolon in
	// a comment does not count, so the scanner counts when the bytes say there may be one
	// too many.
	head, tail := sql[:start], sql[end:]
	if strings.Contains(head, ";") || strings.Count(tail, ";") > 1 {
		h, e := semicolons(head)
		if e != nil {
			return e
		}
		t, e := semicolons(tail)
		if e != nil {
			return e
		}
		if h > 0 || t > 1 {
			return refuse("one statement per call: the text goes on after a semicolon (send each statement in a call of its own)")
		}
	}
	return nil
}

func semicolons(text string) (int, *Error) {
	if !strings.Contains(text, ";") {
		return 0, nil
	}
	toks, err := pg_query.Scan(text)
	if err != nil {
		return 0, syntaxError(err)
	}
	n := 0
	for _, t := range toks.Tokens {
		if t.Token == pg_query.Token_ASCII_59 {
			n++
		}
	}
	return n, nil
}

// commandWord names a refused command by its first word, as the handler wrote it.
func commandWord(sql string, raw *pg_query.RawStmt) string {
	text := sql[raw.StmtLocation:]
	if raw.StmtLen > 0 {
		text = text[:raw.StmtLen]
	}
	if toks, err := pg_query.Scan(text); err == nil {
		for _, t := range toks.Tokens {
			if t.Token == pg_query.Token_SQL_COMMENT || t.Token == pg_query.Token_C_COMMENT {
				continue
			}
			return strings.ToUpper(text[t.Start:t.End])
		}
	}
	return "such"
}

// walker visits every node of a statement's tree.
type walker struct {
	writes     bool // an INSERT, UPDATE, DELETE or MERGE, at the top or in a CTE
	pgSettings bool // a relation named pg_settings, anywhere
}

// walk visits m and every message under it, through every field (protoreflect), so a
// node kind the filter does not name is still searched.
func (w *walker) walk(m protoreflect.Message) *Error {
	if e := w.visit(m.Interface()); e != nil {
		return e
	}
	var e *Error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && e == nil; i++ {
				e = w.walk(l.Get(i).Message())
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					e = w.walk(mv.Message())
				}
				return e == nil
			})
		default:
			e = w.walk(v.Message())
		}
		return e == nil
	})
	return e
}

func (w *walker) visit(m proto.Message) *Error {
	switch n := m.(type) {
	case *pg_query.FuncCall:
		if name := lastString(n.Funcname); refusedFunc(name) != "" {
			return refuseCall(name)
		}
	case *pg_query.ColumnRef:
		// t.f calls f(t) when t has no column f; the first field is never a function.
		for _, f := range n.Fields[min(1, len(n.Fields)):] {
			if s := f.GetString_(); s != nil && refusedFunc(s.Sval) != "" {
				return refuseCall(s.Sval)
			}
		}
	case *pg_query.A_Indirection:
		// (expr).f calls f(expr) when expr has no field f.
		for _, f := range n.Indirection {
			if s := f.GetString_(); s != nil && refusedFunc(s.Sval) != "" {
				return refuseCall(s.Sval)
			}
		}
	case *pg_query.IntoClause:
		return refuse("SELECT ... INTO is not allowed: it creates a table (insert into an existing table instead)")
	case *pg_query.InsertStmt:
		w.writes = true
		return writeTarget("INSERT", n.Relation)
	case *pg_query.UpdateStmt:
		w.writes = true
		return writeTarget("UPDATE", n.Relation)
	case *pg_query.DeleteStmt:
		w.writes = true
		return writeTarget("DELETE", n.Relation)
	case *pg_query.MergeStmt:
		w.writes = true
		return writeTarget("MERGE", n.Relation)
	case *pg_query.RangeVar:
		if n.Relname == "pg_settings" {
			w.pgSettings = true
		}
	}
	return nil
}

// writeTarget refuses writes into the catalogue: its writable views change settings
// (pg_settings), and nothing else there is a handler's to write.
func writeTarget(verb string, rel *pg_query.RangeVar) *Error {
	if rel == nil {
		return nil
	}
	switch {
	case rel.Schemaname == "pg_catalog" || rel.Schemaname == "information_schema" || rel.Schemaname == "pg_toast":
		return refuse("%s on %s.%s is not allowed: a handler writes only its own tables, never the catalogue",
			verb, rel.Schemaname, rel.Relname)
	case rel.Schemaname == "" && strings.HasPrefix(rel.Relname, "pg_"):
		return refuse("%s on %s is not allowed: an unqualified pg_* name is looked up in pg_catalog first "+
			"(a handler writes only its own tables; qualify the name with its schema)", verb, rel.Relname)
	}
	return nil
}

// lastString is the last part of a possibly qualified name.
func lastString(name []*pg_query.Node) string {
	if len(name) == 0 {
		return ""
	}
	if s := name[len(name)-1].GetString_(); s != nil {
		return s.Sval
	}
	return ""
}
