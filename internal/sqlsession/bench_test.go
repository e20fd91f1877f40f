package sqlsession_test

import (
	"context"
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
	b.Run("one-transaction", func(b *testing.B) {
		s := a.grant(true).Begin(time.Now().Add(time.Hour))
		defer s.Close()
		req := []byte(`{"sql": "` + insert + `"}`)
		for range b.N {
			if _, err := s.Query(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
