import { AsyncLocalStorage } from 'node:async_hooks';

const storage = new AsyncLocalStorage<string>();

/**
 * Runs `fn` with `correlationId` as the ambient correlation id. Messages handled inside it carry the id
 * into their steps (`ctx.correlationId`), their timers and their outbox headers.
 */
export function runWithCorrelationId<T>(correlationId: string, fn: () => T): T {
  return storage.run(correlationId, fn);
}

/**
 * Runs `fn` with no ambient correlation id: work for a message that has none (an operator's audit message) does not
 * take the id of whoever started it.
 */
export function runWithoutCorrelationId<T>(fn: () => T): T {
  return storage.exit(fn);
}

/** The ambient correlation id, if code runs inside {@link runWithCorrelationId}. */
export function getCorrelationId(): string | undefined {
  return storage.getStore();
}
