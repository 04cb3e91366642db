/**
 * Counts the dispatcher's claim statements per table, from MikroORM's `onQuery` config hook: a claim is the one
 * UPDATE whose SET begins with the new token (identifiers quoted with `"` on PostgreSQL, with backquotes on SQLite).
 * Pass `onQuery` to `openAnother()`; read `claims` afterwards.
 */
export function claimCounter() {
  const claims = { saga_timer: 0, saga_outbox: 0 };
  const onQuery = (sql: string) => {
    const claim = /update [`"](saga_timer|saga_outbox)[`"] set [`"]token[`"] =/.exec(sql);
    if (claim) claims[claim[1] as keyof typeof claims]++;
    return sql;
  };
  return { claims, onQuery };
}
