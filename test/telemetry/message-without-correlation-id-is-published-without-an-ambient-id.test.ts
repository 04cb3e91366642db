// A message whose row holds no correlation id (an operator's audit message) is published with no ambient correlation
// id. It does not take the id of whoever called dispatcher.runOnce() or dispatcher.start(): a publisher that stamps
// getCorrelationId() on what it sends would otherwise tie the audit message to an unrelated request. Every database.
import { describe, expect, it } from 'vitest';
import {
  getCorrelationId,
  type OutboxEnvelope,
  runWithCorrelationId,
  SagaDispatcher,
  SagaOutbox,
  SagaRuntime,
  silentLogger,
} from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

/** What the publisher saw of one envelope: its correlation id and the ambient one. */
interface Seen {
  readonly type: string;
  readonly correlationId: string | null;
  readonly ambient: string | undefined;
}

for (const dialect of DIALECTS) {
  describe(`a message without a correlation id is published without an ambient one (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    /** A force-completed saga: its audit message (no correlation id) is the only outbox row. */
    async function auditMessageOnly() {
      await db().orm.em.fork().nativeDelete(SagaOutbox, {});
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('audited') });
      await new SagaOperations({ runtime }).forceComplete({ sagaType: 'scripted', sagaId: sagaId!, reason: 'stuck' });
      return runtime;
    }

    const recorder = (seen: Seen[], done?: () => void) => async (envelope: OutboxEnvelope) => {
      seen.push({ type: envelope.type, correlationId: envelope.correlationId, ambient: getCorrelationId() });
      done?.();
    };

    it('runOnce() called under a request’s id', async () => {
      const runtime = await auditMessageOnly();
      const seen: Seen[] = [];
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, publish: recorder(seen) });
      await runWithCorrelationId('req-unrelated', () => dispatcher.runOnce());
      expect(seen).toEqual([{ type: 'SagaForceCompleted', correlationId: null, ambient: undefined }]);
    });

    it('start() called under a request’s id', async () => {
      const runtime = await auditMessageOnly();
      const seen: Seen[] = [];
      const published = deferred();
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, listen: false, publish: recorder(seen, published.resolve) });
      runWithCorrelationId('req-that-started-it', () => dispatcher.start());
      try {
        await published.promise;
      } finally {
        await dispatcher.stop();
      }
      expect(seen).toEqual([{ type: 'SagaForceCompleted', correlationId: null, ambient: undefined }]);
    });
  });
}
