// A saga.step span that fails names the saga instance it failed on (saga.id), as a successful one does: the failing
// span is the one an operator looks for. A start message whose step fails created nothing, so its span names no
// instance. Real SDK, every database.
import { SpanStatusCode } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { failingTimer, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();

/** The saga.step spans ended since the last reset. */
const stepSpans = () =>
  telemetry()
    .spans()
    .filter((s) => s.name === 'saga.step');

for (const dialect of DIALECTS) {
  describe(`a failed saga.step names its saga (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('a step that throws on an existing instance: saga.id on the failed span', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      const key = uniqueKey('failing');
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key });
      telemetry().resetSpans();
      await expect(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'throw', message: 'declined' }] })).rejects.toThrow(
        'declined',
      );
      const [span] = stepSpans();
      expect(span!.status.code).toBe(SpanStatusCode.ERROR);
      expect(span!.attributes).toMatchObject({ 'saga.id': sagaId, 'saga.type': 'scripted', 'error.type': 'Error' });
    });

    it('a timer whose step throws: saga.id on the failed saga.step, as on its saga.timeout', async () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: uniqueKey('failing-timer'),
        actions: [failingTimer('t')],
      });
      telemetry().resetSpans();
      clock.advance({ seconds: 1 });
      expect((await new SagaDispatcher({ runtime, logger: silentLogger }).runOnce()).timers).toMatchObject({ failed: 1 });
      const [span] = stepSpans();
      expect(span!.status.code).toBe(SpanStatusCode.ERROR);
      expect(span!.attributes['saga.id']).toBe(sagaId);
    });

    it('a start message whose step throws created no instance: no saga.id', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      telemetry().resetSpans();
      await expect(
        runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('never'), actions: [{ op: 'throw', message: 'declined' }] }),
      ).rejects.toThrow('declined');
      const [span] = stepSpans();
      expect(span!.status.code).toBe(SpanStatusCode.ERROR);
      expect(span!.attributes).not.toHaveProperty('saga.id');
    });
  });
}
