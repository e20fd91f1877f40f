-- The application's side of flows.yaml's ledger flow: its table, and the role its step
-- runs as with only the grants it needs. `make run` applies it (scripts/run-examples.sh);
-- docs/database.md explains each line. Safe to run again.
do $$ begin
  create role ledger_writer login;
exception when duplicate_object or unique_violation then null; -- made already (maybe by another session)
end $$;
-- The worker logs in as the role for the step's statements (never SET ROLE from its own
-- login). The local cluster trusts local logins; elsewhere give the role a password and the
-- worker the variable sql.password_env names: ALTER ROLE ledger_writer PASSWORD '...'.
alter role ledger_writer login;
create schema if not exists app;
create table if not exists app.ledger (run_id uuid, task_index int, amount int);
grant usage on schema app to ledger_writer;
grant select, insert on app.ledger to ledger_writer;
