-- The application's side of flows.yaml's ledger flow: its table, and the role its step
-- runs as with only the grants it needs. `make run` applies it (scripts/run-examples.sh);
-- docs/database.md explains each line. Safe to run again.
do $$ begin
  create role ledger_writer nologin;
exception when duplicate_object or unique_violation then null; -- made already (maybe by another session)
end $$;
-- The worker's login acts as the role (SET ROLE): it must be a member. (A superuser, like
-- the local cluster's postgres, may act as any role already.)
grant ledger_writer to current_user;
create schema if not exists app;
create table if not exists app.ledger (run_id uuid, task_index int, amount int);
grant usage on schema app to ledger_writer;
grant select, insert on app.ledger to ledger_writer;
