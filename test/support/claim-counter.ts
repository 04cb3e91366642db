/**
 * Counts the dispatcher's claim statements per table, from MikroORM's `onQuery` config hook: a claim is the one
 * UPDATE whose SET begins with the new token (identifiers quoted with `"` on PostgreSQL, with backquotes on SQLite).
 * Pass `onQuery` to `openAnother()`; read `claims` afterwards, or await `whenClaimed` until counts are reached.
 */
export function claimCounter() {
  const claims = { saga_timer: 0, saga_outbox: 0 };
  const waiting: { reached: () => boolean; resolve: () => void }[] = [];
  const onQuery = (sql: string) => {
    const claim = /update [`"](saga_timer|saga_outbox)[`"] set [`"]token[`"] =/.exec(sql);
    if (claim) {
      claims[claim[1] as keyof typeof claims]++;
      for (const waiter of waiting.splice(0)) {
        if (waiter.reached()) waiter.resolve();
        else waiting.push(waiter);
      }
    }
    return sql;
  };
  /** Resolves once at least `counts` claims of each table named were sent. */
  const whenClaimed = (counts: Partial<typeof claims>) =>
    new Promise<void>((resolve) => {
      const reached = () => Object.entries(counts).every(([table, n]) => claims[table as keyof typeof claims] >= (n ?? 0));
      if (reached()) resolve();
      else waiting.push({ reached, resolve });
    });
  return { claims, onQuery, whenClaimed };
}
