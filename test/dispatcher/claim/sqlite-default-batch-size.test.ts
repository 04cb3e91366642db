// On SQLite a dispatcher's default batchSize is 2 x concurrency. Any concurrency the options accept gives a dispatcher
// whose passes run: the derived batchSize is refused up front with OPTION_INVALID, or it claims. And drainDueTimers,
// which gives up after maxPasses (by default 1,000 beyond the passes the timers due at its start need) to catch a
// step that keeps scheduling due timers, drains a backlog of 2,001 timers at concurrency 1 (2 a pass) rather than
// report a step that keeps scheduling.
import { defineEntity } from '@mikro-orm/core';
import { beforeAll, describe, expect, it } from 'vitest';
import { defineSaga, SagaDispatcher, SagaRuntime, SagaState, SagaStateSchema, silentLogger } from '../../../src/index.js';
import { queryRows } from '../../../src/orm/sql-execution.js';
import { drainDueTimers, FakeClock } from '../../../src/testing/index.js';
import { DIALECTS, isSqlite } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

class WideSaga extends SagaState {
  key!: string;
}

const WideSagaSchema = defineEntity({
  class: WideSaga,
  extends: SagaStateSchema,
  tableName: 'wide_concurrency_saga',
  properties: { key: { type: 'string', fieldName: 'key', unique: true } },
});

const wideSaga = defineSaga<WideSaga, { readonly type: 'Start'; readonly key: string }>({
  name: 'wide-concurrency',
  state: WideSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: { Start() {} },
});

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
  describe(`the SQLite default batchSize (${dialect})`, () => {
    const db = useDatabase(dialect, [WideSagaSchema, BacklogSagaSchema]);
    // The drain commits five transactions a pass, 1,001 passes: without their fsyncs it is CPU-bound, seconds instead
    // of a minute. What is pinned is how many passes drainDueTimers allows, not what reaches the disk.
    beforeAll(() => queryRows(db().orm.em, 'pragma synchronous = off', []));
    for (const concurrency of [2 ** 40, 2 ** 62, 1e300]) {
      it(`concurrency ${concurrency}: refused with OPTION_INVALID or a pass runs`, async () => {
        const clock = new FakeClock('2026-02-02T10:00:00.000Z');
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [wideSaga], clock });
        let dispatcher: SagaDispatcher;
        try {
          dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, concurrency, verifySchema: false });
        } catch (error) {
          expect(error).toMatchObject({ code: 'OPTION_INVALID' });
          return;
        }
        await expect(dispatcher.runOnce()).resolves.toMatchObject({ timers: { claimed: 0 } });
      });
    }

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
