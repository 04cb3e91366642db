// Timer telemetry on every database: each timer event is counted once, and a timer delivered to a missing or
// completed saga is stamped `discarded`, not `fired`.
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, SagaTimer, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

// The OpenTelemetry SDK with a reader collecting deltas: each test collects once before it acts, so what the
// next collection holds is what the test did.
const telemetry = useTelemetry();

for (const dialect of DIALECTS) {
  describe(`telemetry counts once (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const quiet = () => db().orm.em.fork().nativeDelete(SagaTimer, {});

    it('a stale firing through a dispatcher adds 1 to saga.timeout.stale, not 2', async () => {
      await quiet();
      const clock = new FakeClock();
      const entered = deferred();
      const release = deferred();
      const gated = scriptedSagaWithTick(async (saga) => {
        entered.resolve();
        await release.promise;
        saga.counter += 100;
      });
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [gated], clock });
      const other = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
      const key = uniqueKey('stale');
      await other.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'schedule', name: 'r', after: 0 }] });
      await telemetry().collect();
      const pass = dispatcher.runOnce();
      await entered.promise;
      // While the timer's step runs, another unit of work replaces the timer: the delivery's claim is worthless.
      await other.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'r', after: 60_000 }] });
      release.resolve();
      expect((await pass).timers).toMatchObject({ claimed: 1, fired: 0, stale: 1 });
      expect((await telemetry().collect()).sum('saga.timeout.stale')).toBe(1);
      expect(runtime.stats().timersStale + dispatcher.stats().timersStale).toBe(1);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0 });
    });

    it('a timer whose saga is gone is stamped discarded, counted once as saga.timeout.discarded, never as fired', async () => {
      await quiet();
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
      const key = uniqueKey('gone');
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'schedule', name: 'g', after: 0 }] });
      await db().orm.em.fork().nativeDelete(ScriptedSaga, { key });
      await telemetry().collect();
      await dispatcher.runOnce();
      const [timer] = await rowsOf(db().orm).timers({ sagaId });
      expect(timer).toMatchObject({ outcome: 'discarded', dispatchedAt: clock.now() });
      const counted = await telemetry().collect();
      expect(counted.sum('saga.timeout.discarded')).toBe(1);
      expect(counted.sum('saga.timeout.fired')).toBe(0);
      expect(counted.sum('saga.timeout.stale')).toBe(0);
      expect(runtime.stats()).toMatchObject({ timersDiscarded: 1, ignoredNoInstance: 1 });
    });

    it('a timer whose saga was completed behind its back is stamped discarded', async () => {
      await quiet();
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const key = uniqueKey('done');
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'schedule', name: 'g', after: 0 }] });
      // Completed by a direct write, so the pending timer survived (the runtime would have deleted it).
      await db().orm.em.fork().nativeUpdate(ScriptedSaga, { key }, { completedAt: clock.now() });
      await new SagaDispatcher({ runtime, logger: silentLogger }).runOnce();
      expect(await rowsOf(db().orm).timers({ sagaId })).toMatchObject([{ outcome: 'discarded' }]);
      expect(runtime.stats()).toMatchObject({ timersDiscarded: 1, ignoredCompleted: 1 });
    });
  });
}
