package sqlsession_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkStatement is the cost of one handler statement (an insert of one row into
// app.ledger) through a session, against the same insert sent by pgx directly:
//
//	go test -run XXX -bench BenchmarkStatement -benchtime 2s -count 3 ./internal/sqlsession/
func BenchmarkStatement(b *testing.B) {
	a := newAppB(b)
	const insert = "insert into app.ledger values (gen_random_uuid(), 0, 1)"
	b.Run("pgx", func(b *testing.B) {
		for range b.N {
			if _, err := a.db.Pool.Exec(context.Background(), insert); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("own-transactions", func(b *testing.B) {
		s := a.grant(false).Begin(time.Now().Add(time.Hour))
		defer s.Close()
		req := []byte(`{"sql": "` + insert + `"}`)
		for range b.N {
			if _, err := s.Query(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct{ name, req string }{
		{"one-transaction", `{"sql": "` + insert + `"}`},
		// Each statement in a savepoint of its own (ctx.sql outside sql.begin).
		{"one-transaction-savepoints", `{"sql": "` + insert + `", "savepoint": true}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := a.grant(true).Begin(time.Now().Add(time.Hour))
			defer s.Close()
			for range b.N {
				if _, err := s.Query(context.Background(), []byte(c.req)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTaskStatements is a transactional task of n inserts (its transaction rolled back at
// the end, as Close does), each statement alone or in a savepoint of its own: the cost of
// ctx.sql's savepoints per statement, below and above the 64 subtransactions a backend
// caches (docs/RATIONALE.md):
//
//	go test -run XXX -bench BenchmarkTaskStatements -benchtime 200x ./internal/sqlsession/
func BenchmarkTaskStatements(b *testing.B) {
	a := newAppB(b)
	const insert = "insert into app.ledger values (gen_random_uuid(), 0, 1)"
	for _, n := range []int{1, 10, 60, 200} {
		for _, sp := range []bool{false, true} {
			req := []byte(fmt.Sprintf(`{"sql": %q, "savepoint": %v}`, insert, sp))
			b.Run(fmt.Sprintf("n=%d/savepoints=%v", n, sp), func(b *testing.B) {
				g := a.grant(true)
				for range b.N {
					s := g.Begin(time.Now().Add(time.Hour))
					for range n {
						if _, err := s.Query(context.Background(), req); err != nil {
							b.Fatal(err)
						}
					}
					s.Close()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/statement")
			})
		}
	}
}

// BenchmarkSnapshotsBesideATask is another session's reads of app.ledger while a task's
// transaction holds 200 uncommitted inserts, made with or without a savepoint each: past 64
// subtransactions the server's snapshots overflow and each read of the task's rows looks
// their transaction up in pg_subtrans.
//
//	go test -run XXX -bench BenchmarkSnapshotsBesideATask -benchtime 2s ./internal/sqlsession/
func BenchmarkSnapshotsBesideATask(b *testing.B) {
	a := newAppB(b)
	const insert = "insert into app.ledger values (gen_random_uuid(), 0, 1)"
	for _, sp := range []bool{false, true} {
		b.Run(fmt.Sprintf("savepoints=%v", sp), func(b *testing.B) {
			s := a.grant(true).Begin(time.Now().Add(time.Hour))
			defer s.Close()
			req := []byte(fmt.Sprintf(`{"sql": %q, "savepoint": %v}`, insert, sp))
			for range 200 {
				if _, err := s.Query(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				var n int
				if err := a.db.Pool.QueryRow(context.Background(), "select count(*) from app.ledger").Scan(&n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
