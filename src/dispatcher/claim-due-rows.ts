import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/core';
import type { DialectAdapter } from '../dialect/dialect-adapter.js';
import type { TimerDelivery } from '../saga/saga-runtime.js';
import { claimDueRowsSkipLocked, claimRowByToken, DISPATCH_TABLES, type DispatchTable, selectDueRows } from '../sql/dispatch-statements.js';
import type { OutboxEnvelope } from './outbox-envelope.js';

/** A claimed outbox row: the envelope and the claim token. */
export interface ClaimedOutboxRow {
  readonly envelope: OutboxEnvelope;
  readonly token: string;
  readonly lastError: string | null;
}

/**
 * Claims up to `limit` due rows of `table` under a lease, oldest first. On PostgreSQL one statement
 * (`FOR UPDATE SKIP LOCKED`); elsewhere each row is taken by its concurrency token inside one transaction,
 * so two dispatchers that read the same row cannot both own it.
 */
async function claimDueRows(
  em: EntityManager,
  dialect: DialectAdapter,
  table: DispatchTable,
  now: Date,
  leaseUntil: Date,
  limit: number,
): Promise<Record<string, unknown>[]> {
  if (dialect.supportsSkipLocked) {
    return em.transactional((tx) => claimDueRowsSkipLocked(tx, table, now, leaseUntil, limit));
  }
  return em.transactional(async (tx) => {
    const claimed: Record<string, unknown>[] = [];
    for (const due of await selectDueRows(tx, table, now, limit)) {
      claimed.push(...(await claimRowByToken(tx, table, due.id, due.token, randomUUID(), leaseUntil)));
    }
    return claimed;
  });
}

const byAvailability = (dialect: DialectAdapter) => (a: Record<string, unknown>, b: Record<string, unknown>) =>
  dialect.readDate(a.available_at)!.getTime() - dialect.readDate(b.available_at)!.getTime() || String(a.id).localeCompare(String(b.id));

/** Claims due timers and turns them into deliveries for the runtime. */
export async function claimDueTimers(
  em: EntityManager,
  dialect: DialectAdapter,
  now: Date,
  leaseUntil: Date,
  limit: number,
): Promise<TimerDelivery[]> {
  const rows = await claimDueRows(em, dialect, DISPATCH_TABLES.timer, now, leaseUntil, limit);
  return rows.sort(byAvailability(dialect)).map((row) => ({
    id: String(row.id),
    token: String(row.token),
    sagaType: String(row.saga_type),
    sagaId: String(row.saga_id),
    name: String(row.name),
    messageType: String(row.message_type),
    payload: dialect.readJson(row.payload),
    dueAt: dialect.readDate(row.due_at)!,
    attempts: Number(row.attempts),
    correlationId: row.correlation_id == null ? null : String(row.correlation_id),
    lastError: row.last_error == null ? null : String(row.last_error),
  }));
}

/** Claims due outbox rows and turns them into envelopes for the publisher. */
export async function claimDueOutboxRows(
  em: EntityManager,
  dialect: DialectAdapter,
  now: Date,
  leaseUntil: Date,
  limit: number,
): Promise<ClaimedOutboxRow[]> {
  const rows = await claimDueRows(em, dialect, DISPATCH_TABLES.outbox, now, leaseUntil, limit);
  return rows.sort(byAvailability(dialect)).map((row) => ({
    token: String(row.token),
    lastError: row.last_error == null ? null : String(row.last_error),
    envelope: {
      id: String(row.id),
      type: String(row.message_type),
      payload: dialect.readJson(row.payload) as Record<string, unknown>,
      headers: dialect.readJson(row.headers) as Record<string, string>,
      sagaType: String(row.saga_type),
      sagaId: String(row.saga_id),
      correlationId: row.correlation_id == null ? null : String(row.correlation_id),
      attempts: Number(row.attempts),
      createdAt: dialect.readDate(row.created_at)!,
    },
  }));
}
