/**
 * A dispatcher in a process of its own, with its own MikroORM instance, for the reliability tests.
 *
 *   node --import tsx test/support/dispatcher-process.ts <mode> <postgres url>
 *
 * mode `drain`: runs passes until one claims nothing; prints one `claim` line per claimed timer and a final
 *   `done` line (JSON lines on stdout). Uses the system clock.
 * mode `hang`: claims due timers and hangs inside their steps forever; prints `entered <n>` each time a step
 *   starts, so the parent can kill the process between claim and commit.
 */
import { MikroORM } from '@mikro-orm/core';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../fixtures/scripted-saga.js';
import { connectionOptions } from './databases.js';

const [mode, url] = process.argv.slice(2);
if (!url || (mode !== 'drain' && mode !== 'hang')) {
  console.error('usage: dispatcher-process.ts <drain|hang> <postgres url>');
  process.exit(2);
}
const orm = await MikroORM.init(connectionOptions('postgresql', url, [ScriptedSaga]));
const print = (line: object) => process.stdout.write(`${JSON.stringify({ pid: process.pid, ...line })}\n`);

if (mode === 'drain') {
  const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], concurrency: { maxAttempts: 100 } });
  const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, batchSize: 100, concurrency: 10 });
  dispatcher.on('claimed', ({ ids, at, leaseUntil }) => {
    for (const id of ids) print({ event: 'claim', id, at: at.toISOString(), leaseUntil: leaseUntil.toISOString() });
  });
  const totals = { passes: 0, claimed: 0, fired: 0, stale: 0, failed: 0 };
  for (;;) {
    const pass = await dispatcher.runOnce();
    totals.passes++;
    totals.claimed += pass.timers.claimed;
    totals.fired += pass.timers.fired;
    totals.stale += pass.timers.stale;
    totals.failed += pass.timers.failed;
    if (pass.timers.claimed === 0) break;
  }
  print({ event: 'done', ...totals });
  await orm.close(true);
} else {
  let entered = 0;
  const hanging = scriptedSagaWithTick(async () => {
    print({ event: 'entered', count: ++entered });
    // Never returns: the process is killed while it holds the claims.
    await new Promise(() => {});
  });
  const runtime = new SagaRuntime({ em: orm.em, sagas: [hanging] });
  const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, batchSize: 100, concurrency: 50 });
  dispatcher.on('claimed', ({ ids }) => print({ event: 'claimed', count: ids.length }));
  await dispatcher.runOnce();
}
