// A process without an OpenTelemetry SDK makes up no trace context, but hands on one it finds: a timer row written
// by an instrumented process (its trace_context set) is delivered here under the API's non-recording spans, which
// carry the stored context. The outbox row the woken step writes stores that same context, and its envelope carries
// it as traceparent, so the trace goes on through the process without an SDK. Every database.
import { beforeAll, describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, SagaTimer, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { unregisterAll } from '../support/telemetry.js';

beforeAll(() => {
  unregisterAll();
});

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

for (const dialect of DIALECTS) {
  describe(`a stored trace context passes through a process without an SDK (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('the woken step’s outbox row stores the timer’s context, and its envelope carries it', async () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const published: OutboxEnvelope[] = [];
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, publish: async (e) => void published.push(e) });
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: uniqueKey('pass-through'),
        actions: [
          {
            op: 'schedule',
            name: 'reminder',
            after: { hours: 1 },
            message: { type: 'Tick', actions: [{ op: 'send', message: { type: 'Remind' } }] },
          },
        ],
      });
      const [timer] = await rowsOf(db().orm).timers({ sagaId });
      expect(timer!.traceContext).toBeNull();
      // As an instrumented process would have written it.
      await db()
        .orm.em.fork()
        .nativeUpdate(SagaTimer, { sagaId }, { traceContext: JSON.stringify({ traceparent: TRACEPARENT }) });

      clock.advance({ hours: 1 });
      expect((await dispatcher.runOnce()).timers.fired).toBe(1);
      expect((await dispatcher.runOnce()).outbox.published).toBe(1);
      const [row] = await rowsOf(db().orm).outbox(sagaId!);
      expect(JSON.parse(row!.traceContext!)).toEqual({ traceparent: TRACEPARENT });
      expect(published[0]!.headers.traceparent).toBe(TRACEPARENT);
    });
  });
}
