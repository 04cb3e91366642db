// route(): one message, every saga that handles its type, one unit of work each.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../src/index.js';
import { type ScriptedMessage, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

class AuditSaga extends SagaState {
  subject!: string;
  seen: number = 0;
}

const AuditSagaSchema = defineEntity({
  class: AuditSaga,
  extends: SagaStateSchema,
  tableName: 'audit_saga',
  properties: {
    subject: { type: 'string', length: 100, fieldName: 'subject', unique: true },
    seen: { type: 'integer', fieldName: 'seen' },
  },
});

const auditSaga = defineSaga<AuditSaga, Extract<ScriptedMessage, { type: 'Start' | 'Do' }>>({
  name: 'audit',
  state: AuditSaga,
  correlation: { property: 'subject', from: (m) => m.key },
  startedBy: ['Start'],
  steps: {
    Start(saga) {
      saga.seen += 1;
    },
    Do(saga) {
      saga.seen += 1;
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`route (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, AuditSagaSchema]);

    it('hands a message to every registered saga with a step for its type, each in its own unit of work', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga, auditSaga] });
      const key = uniqueKey('route');
      const started = await runtime.route({ type: 'Start', key });
      expect(started.map((r) => [r.sagaType, r.outcome, r.version])).toEqual([
        ['scripted', 'started', 0],
        ['audit', 'started', 0],
      ]);
      const handled = await runtime.route({ type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(handled.map((r) => [r.sagaType, r.outcome, r.version])).toEqual([
        ['scripted', 'handled', 1],
        ['audit', 'handled', 1],
      ]);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1 });
      expect(await db().orm.em.fork().findOne(AuditSaga, { subject: key })).toMatchObject({ seen: 2, version: 1 });
      // A type nobody handles goes nowhere; a timer-only type has no correlation rule, which is an error.
      expect(await runtime.route({ type: 'Unknown' })).toEqual([]);
      await expect(runtime.route({ type: 'Tick', label: 'x' })).rejects.toMatchObject({ code: 'CORRELATION_UNDEFINED' });
    });
  });
}
