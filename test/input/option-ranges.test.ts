// Every numeric option of the runtime, the dispatcher and the operations is range-checked when it is built:
// OPTION_INVALID at construction, never a value taken that later fails as PERSISTENCE_FAILED (a message id
// retention of 1e300 ms gave the purge an invalid cutoff) or a wait Node.js fires at once. The largest value each
// option takes works on every database.
import { describe, expect, it } from 'vitest';
import {
  MAX_DISPATCH_ATTEMPTS,
  MAX_PAYLOAD_BYTES_LIMIT,
  MAX_PURGE_BATCH_SIZE,
  MAX_SPAN_MS,
  MAX_WAIT_MS,
  SagaDispatcher,
  type SagaDispatcherOptions,
  SagaRuntime,
  type SagaRuntimeOptions,
  silentLogger,
} from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

type RuntimeOptions = Omit<SagaRuntimeOptions, 'em' | 'sagas'>;
type DispatcherOptions = Omit<SagaDispatcherOptions, 'runtime'>;

const TOO_BIG = [1e300, Number.POSITIVE_INFINITY];

/** Runtime options out of range, each with the option it names. */
const RUNTIME_CASES: [string, RuntimeOptions][] = [
  ...TOO_BIG.map((v): [string, RuntimeOptions] => ['messageIds.retentionMs', { messageIds: { retentionMs: v } }]),
  ['messageIds.retentionMs', { messageIds: { retentionMs: MAX_SPAN_MS + 1 } }],
  ['messageIds.retentionMs', { messageIds: { retentionMs: -1 } }],
  ['messageIds.retentionMs', { messageIds: { retentionMs: '7d' as never } }],
  ['concurrency.maxAttempts', { concurrency: { maxAttempts: 1e300 } }],
  ['concurrency.baseDelayMs', { concurrency: { baseDelayMs: MAX_WAIT_MS + 1 } }],
  ['concurrency.maxDelayMs', { concurrency: { maxDelayMs: Number.POSITIVE_INFINITY } }],
  ['maxPayloadBytes', { maxPayloadBytes: MAX_PAYLOAD_BYTES_LIMIT + 1 }],
  ['groupCommit.maxUnits', { groupCommit: { maxUnits: 1e300 } }],
  ['groupCommit.maxGroups', { groupCommit: { maxGroups: 2 ** 53 } }],
];

/** Dispatcher options out of range, each with the option it names. */
const DISPATCHER_CASES: [string, DispatcherOptions][] = [
  ...(['pollIntervalMs', 'leaseMs', 'deliveryTimeoutMs', 'dbRetryMaxMs', 'stopTimeoutMs'] as const).map(
    (name): [string, DispatcherOptions] => [name, { [name]: MAX_WAIT_MS + 1 }],
  ),
  ['backoff.baseMs', { backoff: { baseMs: 1e300 } }],
  ['backoff.maxMs', { backoff: { maxMs: MAX_SPAN_MS + 1 } }],
  ['catchUp.maxAgeMs', { catchUp: { maxAgeMs: 1e300 } }],
  ['catchUp.backlogAfterMs', { catchUp: { backlogAfterMs: MAX_SPAN_MS + 1 } }],
  ['maxAttempts', { maxAttempts: MAX_DISPATCH_ATTEMPTS + 1 }],
];

for (const dialect of DIALECTS) {
  describe(`numeric options are range-checked (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const runtimeWith = (options: RuntimeOptions = {}) =>
      new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock('2026-05-04T08:00:00Z'), ...options });

    it('a runtime option out of range is OPTION_INVALID naming it, from SagaRuntime and from SagaOperations', () => {
      for (const [name, options] of RUNTIME_CASES) {
        const refused = expect.objectContaining({ code: 'OPTION_INVALID', message: expect.stringContaining(name) });
        expect(() => runtimeWith(options), name).toThrow(refused);
      }
      // The case: taken before, the purge then failed with PERSISTENCE_FAILED.
      const operations = () => new SagaOperations({ em: db().orm.em, sagas: [scriptedSaga], messageIds: { retentionMs: 1e300 } });
      expect(operations).toThrow(expect.objectContaining({ code: 'OPTION_INVALID', message: expect.stringContaining('retentionMs') }));
    });

    it('a dispatcher option out of range is OPTION_INVALID naming it', () => {
      const runtime = runtimeWith();
      for (const [name, options] of DISPATCHER_CASES) {
        const refused = expect.objectContaining({ code: 'OPTION_INVALID', message: expect.stringContaining(name) });
        expect(() => new SagaDispatcher({ runtime, logger: silentLogger, ...options }), name).toThrow(refused);
      }
    });

    it('purgeExpiredMessageIds refuses a batchSize above MAX_PURGE_BATCH_SIZE and a fractional maxBatches', async () => {
      const runtime = runtimeWith();
      for (const options of [{ batchSize: MAX_PURGE_BATCH_SIZE + 1 }, { batchSize: 1e300 }, { maxBatches: 1.5 }]) {
        await expect(runtime.purgeExpiredMessageIds(options)).rejects.toMatchObject({ code: 'OPTION_INVALID' });
      }
    });

    it('the largest retention purges, and the largest spans and waits give a dispatcher whose passes run', async () => {
      const runtime = runtimeWith({ messageIds: { retentionMs: MAX_SPAN_MS }, concurrency: { baseDelayMs: MAX_WAIT_MS } });
      const ops = new SagaOperations({ runtime });
      expect(await ops.purge({ expiredMessageIds: true, batchSize: MAX_PURGE_BATCH_SIZE })).toMatchObject({ messageIds: 0 });
      const clock = runtime.options.clock as FakeClock;
      const dispatcher = new SagaDispatcher({
        runtime,
        logger: silentLogger,
        leaseMs: MAX_WAIT_MS,
        deliveryTimeoutMs: MAX_WAIT_MS,
        backoff: { baseMs: MAX_SPAN_MS, maxMs: MAX_SPAN_MS, jitter: false },
        catchUp: { policy: 'skip-beyond-max-age', maxAgeMs: MAX_SPAN_MS, backlogAfterMs: MAX_SPAN_MS },
        maxAttempts: MAX_DISPATCH_ATTEMPTS,
      });
      const key = uniqueKey('spans');
      const failing = { type: 'Tick', label: 'boom', actions: [{ op: 'throw', message: 'boom' }] } as const;
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [{ op: 'schedule', name: 'boom', message: failing }],
      });
      clock.advance(1_000);
      expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, failed: 1 });
      // Backed off by 100 years: still a date both databases store.
      const [timer] = await rowsOf(db().orm).timers({ sagaId });
      expect(timer!.availableAt.getTime()).toBe(clock.now().getTime() + MAX_SPAN_MS);
    });
  });
}
