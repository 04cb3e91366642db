/**
 * The statement that bounds a group transaction's lock waits (PostgreSQL): `lock_timeout` for the rest of the
 * transaction, `timeoutMs` or the connection's own setting when that is not longer. Its one row's `own` says
 * which is in force: true when the connection's own limit is. Without parameters, so it can go with another
 * statement in one simple query. `timeoutMs` is a validated integer option, never input.
 */
export function lockTimeoutSql(timeoutMs: number): string {
  // current_setting() shows the value with its unit ('0', '50ms', '2min'), which interval input reads; pg_settings
  // would give plain milliseconds, but reading that view costs milliseconds per statement. The setting is read in
  // a subquery that OFFSET 0 keeps from being merged into the outer select: merged, set_config() runs before the
  // comparison reads the setting, which then always finds its own value.
  const own = "current_setting('lock_timeout')::interval";
  return (
    `select set_config('lock_timeout', case when own then setting else '${timeoutMs}ms' end, true), own from ` +
    `(select current_setting('lock_timeout') as setting, ${own} > interval '0' and ${own} <= interval '${timeoutMs} milliseconds' as own offset 0) as current`
  );
}
