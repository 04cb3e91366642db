// drainDueTimers gives up after maxPasses (default 1,000) to catch a step that keeps scheduling due timers. On
// SQLite the default batchSize is 2 x concurrency (commit 53a2b4a), so with concurrency 1 a pass claims 2 timers:
// a backlog of 2,001 timers, all scheduled once and none rescheduling, must still drain rather than be reported
// as a step that keeps scheduling.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaDispatcher, SagaRuntime, SagaState, SagaStateSchema, silentLogger } from '../../../src/index.js';
import { drainDueTimers, FakeClock } from '../../../src/testing/index.js';
import { DIALECTS, isSqlite } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

const TIMERS = 2_001;

class BacklogSaga extends SagaState {
  key!: string;
}

const BacklogSagaSchema = defineEntity({
  class: BacklogSaga,
  extends: SagaStateSchema,
  tableName: 'drain_backlog_saga',
  properties: { key: { type: 'string', fieldName: 'key', unique: true } },
});

const backlogSaga = defineSaga<BacklogSaga, { readonly type: 'Start'; readonly key: string } | { readonly type: 'Tick' }>({
  name: 'drain-backlog',
  state: BacklogSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(_saga, _message, ctx) {
      for (let i = 0; i < TIMERS; i++) ctx.schedule(`tick-${i}`, 0, { type: 'Tick' });
    },
    Tick() {},
  },
});

for (const dialect of DIALECTS.filter(isSqlite)) {
  describe(`drainDueTimers with the SQLite default claim size (${dialect})`, () => {
    const db = useDatabase(dialect, [BacklogSagaSchema]);

    it(`drains ${TIMERS} timers scheduled once with concurrency 1 and the default batchSize`, async () => {
      const clock = new FakeClock('2026-02-02T10:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [backlogSaga], clock });
      await runtime.handle(backlogSaga, { type: 'Start', key: uniqueKey('backlog') });
      clock.advance({ seconds: 1 });
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, concurrency: 1 });
      expect(dispatcher.options.batchSize).toBe(2);

      const report = await drainDueTimers(dispatcher);

      expect(report).toMatchObject({ dueBefore: TIMERS, dueAfter: 0 });
      expect(report.timers.fired).toBe(TIMERS);
    }, 120_000);
  });
}
