/**
 * Handles a run of messages with ids in a process of its own, for the idempotency tests.
 *
 *   node --import tsx test/support/handler-process.ts <dialect> <location> <prefix> <messages> <sagas>
 *
 * Message i increments saga `<prefix>-<i % sagas>` and carries the id `<prefix>-m<i>`. Prints `{"event":"ready"}`
 * once connected and starts on the first line that arrives on stdin, so two processes start together (the tests run
 * it built into JavaScript: test/support/child-scripts.ts). Prints one JSON line at the end: how many were handled
 * and how many were duplicates.
 */
import { MikroORM } from '@mikro-orm/core';
import { SagaRuntime } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { ormOptions, parseDialect } from './orm-options.js';

const [dialectArg, location, prefix, messages, sagas] = process.argv.slice(2);
const dialect = parseDialect(dialectArg);
if (!dialect || !location || !prefix || !(Number(messages) > 0) || !(Number(sagas) > 0)) {
  console.error('usage: handler-process.ts <postgresql|sqlite|better-sqlite> <location> <prefix> <messages> <sagas>');
  process.exit(2);
}
const orm = await MikroORM.init(ormOptions(dialect, location, [ScriptedSaga]));
process.stdout.write(`${JSON.stringify({ pid: process.pid, event: 'ready' })}\n`);
await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
process.stdin.pause();
const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], concurrency: { maxAttempts: 1_000 } });
const counts: Record<string, number> = {};
const queue = Array.from({ length: Number(messages) }, (_, i) => i);
// A few messages at a time, like a broker consumer with prefetch.
await Promise.all(
  Array.from({ length: 4 }, async () => {
    for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
      const key = `${prefix}-${i % Number(sagas)}`;
      const result = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${prefix}-m${i}` });
      counts[result.outcome] = (counts[result.outcome] ?? 0) + 1;
    }
  }),
);
process.stdout.write(`${JSON.stringify({ pid: process.pid, counts })}\n`);
await orm.close(true);
