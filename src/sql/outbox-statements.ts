import type { DatabaseContext } from './database-context.js';
import { placeholders, type SqlStatement } from './sql-executor.js';

/** The columns of an outbox row written by a unit of work. */
export interface OutboxWrite {
  readonly id: string;
  readonly sagaType: string;
  readonly sagaId: string;
  readonly messageType: string;
  readonly payloadJson: string;
  readonly headersJson: string;
  readonly correlationId: string | null;
  /** The stored trace context of the unit of work that writes it (`readStoredTraceContext` reads it). */
  readonly traceContext: string | null;
  readonly token: string;
  readonly createdAt: Date;
}

/** Inserts outbox rows in one statement, available for relay at once. */
export function insertOutboxMessages(db: DatabaseContext, messages: readonly OutboxWrite[]): SqlStatement {
  const { table, column: c } = db.tables.outbox;
  const row = `(${placeholders(10)}, 0, ?)`;
  const columns = [
    c.id,
    c.sagaType,
    c.sagaId,
    c.messageType,
    c.payload,
    c.headers,
    c.correlationId,
    c.traceContext,
    c.availableAt,
    c.token,
    c.attempts,
    c.createdAt,
  ];
  return {
    sql: `insert into ${table} (${columns.join(', ')})
     values ${messages.map(() => row).join(', ')}`,
    params: messages.flatMap((m) => [
      m.id,
      m.sagaType,
      m.sagaId,
      m.messageType,
      m.payloadJson,
      m.headersJson,
      m.correlationId,
      m.traceContext,
      m.createdAt,
      m.token,
      m.createdAt,
    ]),
  };
}
