/**
 * An application process that stages deliveries for the scripted saga in its own transactions, for the staging tests.
 *
 *   node --import tsx test/support/stager-process.ts <dialect> <location> exit-after-commit <key>
 *     Stages a Start for <key> in em.transactional(), then exits with process.exit(0) at once: no dispatcher ran, the
 *     ORM was never closed.
 *   node --import tsx test/support/stager-process.ts <dialect> <location> steps <key> <note>
 *     One transaction, driven one step per line on stdin: `stage` (begin, stageDelivery of a Do noting <note>; nothing
 *     is sent), `flush` (the row's INSERT, after the saga key's lock on PostgreSQL), `commit`. Prints
 *     {"event":"<step>ed"} after each, and {"event":"ready","backend":<pid>} first (PostgreSQL: its connection's pid).
 *   node --import tsx test/support/stager-process.ts <dialect> <location> interleave <prefix> <sagas> <count> <label>
 *     Prints {"event":"ready"} once connected; on the first line on stdin, stages <count> Do messages, each in a transaction of its own, for sagas
 *     <prefix>-<random 0..sagas-1>, noting "<label>:<i>". Prints one JSON line: for each, its saga key, its note, and
 *     when its COMMIT was sent and when it returned (ms since the epoch, sub-ms), then exits.
 *
 * The tests run it built into JavaScript (test/support/child-scripts.ts).
 */
import { createInterface } from 'node:readline';
import { MikroORM } from '@mikro-orm/core';
import { SagaRuntime } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { ormOptions, parseDialect } from './orm-options.js';

const [dialectArg, location, mode, ...rest] = process.argv.slice(2);
const dialect = parseDialect(dialectArg);
if (!dialect || !location || !['exit-after-commit', 'steps', 'interleave'].includes(mode ?? '')) {
  console.error('usage: stager-process.ts <postgresql|sqlite|better-sqlite> <location> <exit-after-commit|steps|interleave> ...');
  process.exit(2);
}
const orm = await MikroORM.init(ormOptions(dialect, location, [ScriptedSaga]));
// The runtime checks the schema before a unit of work only: staging sends nothing on its own.
const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
const print = (line: object) => process.stdout.write(`${JSON.stringify({ pid: process.pid, ...line })}\n`);
const now = () => performance.timeOrigin + performance.now();

if (mode === 'exit-after-commit') {
  const [key] = rest;
  await orm.em.fork().transactional(async (em) => {
    runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key: key!, actions: [{ op: 'inc' }] });
  });
  print({ event: 'committed' });
  process.exit(0);
}

const input = createInterface({ input: process.stdin });
const lines = input[Symbol.asyncIterator]();
const nextLine = async () => (await lines.next()).value as string | undefined;

if (mode === 'steps') {
  const [key, note] = rest;
  const em = orm.em.fork();
  await em.begin();
  const [backend] =
    dialect === 'postgresql'
      ? await em.getConnection().execute<{ pid: number }[]>('select pg_backend_pid() as pid', [], 'all', em.getTransactionContext())
      : [];
  print({ event: 'ready', backend: backend?.pid ?? null });
  for (let line = await nextLine(); line !== undefined; line = await nextLine()) {
    if (line === 'stage') {
      runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key: key!, actions: [{ op: 'note', text: note! }] });
      print({ event: 'staged' });
    } else if (line === 'flush') {
      await em.flush();
      print({ event: 'flushed' });
    } else if (line === 'commit') {
      await em.commit();
      print({ event: 'committed' });
      break;
    }
  }
} else {
  const [prefix, sagas, count, label] = rest;
  print({ event: 'ready' });
  await nextLine();
  const commits: { key: string; note: string; sent: number; returned: number }[] = [];
  for (let i = 0; i < Number(count); i++) {
    const key = `${prefix}-${Math.floor(Math.random() * Number(sagas))}`;
    const note = `${label}:${i}`;
    const em = orm.em.fork();
    await em.begin();
    runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: note }] });
    await em.flush();
    const sent = now();
    await em.commit();
    commits.push({ key, note, sent, returned: now() });
  }
  print({ commits });
}
// Stdin open would keep the process alive.
input.close();
process.stdin.destroy();
await orm.close(true);
