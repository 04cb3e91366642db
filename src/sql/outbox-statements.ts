import type { EntityManager } from '@mikro-orm/core';
import { placeholders, runStatement } from './sql-executor.js';

/** The columns of an outbox row written by a unit of work. */
export interface OutboxWrite {
  readonly id: string;
  readonly sagaType: string;
  readonly sagaId: string;
  readonly messageType: string;
  readonly payloadJson: string;
  readonly headersJson: string;
  readonly correlationId: string | null;
  readonly token: string;
  readonly createdAt: Date;
}

/** Inserts outbox rows in one statement, available for relay at once. */
export function insertOutboxMessages(em: EntityManager, messages: readonly OutboxWrite[]): Promise<number> {
  const row = `(${placeholders(9)}, 0, ?)`;
  return runStatement(
    em,
    `insert into "saga_outbox" ("id", "saga_type", "saga_id", "message_type", "payload", "headers", "correlation_id",
       "available_at", "token", "attempts", "created_at")
     values ${messages.map(() => row).join(', ')}`,
    messages.flatMap((m) => [
      m.id,
      m.sagaType,
      m.sagaId,
      m.messageType,
      m.payloadJson,
      m.headersJson,
      m.correlationId,
      m.createdAt,
      m.token,
      m.createdAt,
    ]),
  );
}
