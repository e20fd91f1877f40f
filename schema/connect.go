package schema

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoDatabaseURL is returned by Connect when it is given no URL.
var ErrNoDatabaseURL = errors.New("no database URL: pass --database-url or set DATABASE_URL")

// Connect opens one connection and turns the usual failures into messages that say where
// it tried to connect and why it failed (never the password).
func Connect(ctx context.Context, url string) (*pgx.Conn, error) {
	if strings.TrimSpace(url) == "" {
		return nil, ErrNoDatabaseURL
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("invalid database URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, ExplainConnectError(cfg.Host, cfg.Port, cfg.User, cfg.Database, err)
	}
	return conn, nil
}

// ExplainConnectError rewrites a connection failure as "cannot connect to PostgreSQL at
// host:port: reason", with the underlying error kept for errors.Is/As.
func ExplainConnectError(host string, port uint16, user, database string, err error) error {
	where := net.JoinHostPort(host, strconv.Itoa(int(port)))
	if strings.HasPrefix(host, "/") {
		where = fmt.Sprintf("%s/.s.PGSQL.%d", host, port)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01", "28000":
			return wrapf(err, "PostgreSQL at %s refused user %q: %s", where, user, pgErr.Message)
		case "3D000":
			return wrapf(err, "PostgreSQL at %s has no database %q", where, database)
		case "42501":
			return wrapf(err, "PostgreSQL at %s: user %q may not connect to database %q (needs the CONNECT privilege)",
				where, user, database)
		case "53300":
			return wrapf(err, "PostgreSQL at %s has no free connection slots (max_connections)", where)
		}
		return wrapf(err, "cannot connect to PostgreSQL at %s: %s", where, pgErr.Message)
	}
	hint := ""
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		hint = " (is the server running?)"
	}
	return wrapf(err, "cannot connect to PostgreSQL at %s%s: %s", where, hint, rootCause(err))
}

// explained is an error whose message is written for people; Unwrap keeps the original.
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

func wrapf(err error, format string, args ...any) error {
	return &explained{msg: fmt.Sprintf(format, args...), err: err}
}

// rootCause is the network-level reason ("dial tcp 127.0.0.1:1: connect: connection
// refused") rather than pgx's whole chain, which repeats once per address and TLS attempt.
func rootCause(err error) string {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.Error()
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return opErr.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			break
		}
		err = next
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}
