// Duplicates in one group commit: the same saga twice in one group (the second unit conflicts on the first one's
// uncommitted write and is retried), and one message id delivered twice in one group (one applies, one is a duplicate).
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type HandleResult, SagaRuntime } from '../../../src/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { drainContinuations, FlushHold } from '../../support/flush-hold.js';
import { type GatedSaga, gatedSaga } from '../../support/gated-saga.js';
import { rowsOf } from '../../support/rows.js';
import { StepGate } from '../../support/step-gate.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`duplicates in one group (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });

    async function groupedRuntime(saga: GatedSaga) {
      const log: string[] = [];
      const orm = await db().openAnother({ debug: ['query'], logger: (line: string) => log.push(line) });
      opened.push(orm);
      const hold = new FlushHold();
      orm.em.getEventManager().registerSubscriber(hold);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [saga], groupCommit: { maxGroups: 1 }, concurrency: { baseDelayMs: 0 } });
      return { runtime, hold, log, orm };
    }

    /** Makes the gated units of `gate` reach their write phase together while the group of `blockerKey` is written. */
    async function inOneGroup(runtime: SagaRuntime, saga: GatedSaga, hold: FlushHold, gate: StepGate, blockerKey: string) {
      await gate.all.promise;
      const blocker = hold.arm(blockerKey);
      const first = runtime.handle(saga, { type: 'Do', key: blockerKey, inc: 1 });
      await blocker.reached.promise;
      gate.go.resolve();
      await drainContinuations();
      blocker.release.resolve();
      await first;
    }

    const savepoints = (log: string[]) => log.filter((line) => /savepoint saga_unit_\d+/i.test(line) && !/rollback to/i.test(line));

    it("the same saga twice in one group: the second unit conflicts on the first one's uncommitted write and is retried, both counted", async () => {
      const gate = new StepGate(2);
      const saga = gatedSaga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const [a, s] = ['a', 's'].map((n) => uniqueKey(`twice-${n}`)) as [string, string];
      for (const key of [a, s]) await plain.handle(saga, { type: 'Start', key });
      const { runtime, hold, log } = await groupedRuntime(saga);
      const units = [
        runtime.handle(saga, { type: 'Do', key: s, inc: 1, gated: true }),
        runtime.handle(saga, { type: 'Do', key: s, inc: 10, gated: true }),
      ];
      await inOneGroup(runtime, saga, hold, gate, a);
      const results = (await Promise.all(units)) as HandleResult[];
      expect(savepoints(log).length).toBeGreaterThanOrEqual(2);
      expect(results.map((r) => r.conflicts).sort()).toEqual([0, 1]);
      expect(await rowsOf(db().orm).saga(s)).toMatchObject({ counter: 11, version: 2 });
    });

    it('one message id delivered twice in one group to a NEW saga: one start, one duplicate, the step applied once', async () => {
      const gate = new StepGate(2);
      const saga = gatedSaga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const [a, fresh] = ['a', 'fresh'].map((n) => uniqueKey(`dupnew-${n}`)) as [string, string];
      await plain.handle(saga, { type: 'Start', key: a });
      const { runtime, hold, log } = await groupedRuntime(saga);
      const units = [
        runtime.handle(saga, { type: 'Start', key: fresh, inc: 1, gated: true }, { messageId: 'm-1' }),
        runtime.handle(saga, { type: 'Start', key: fresh, inc: 1, gated: true }, { messageId: 'm-1' }),
      ].map((p) => p.catch((error: unknown) => error));
      await inOneGroup(runtime, saga, hold, gate, a);
      const results = (await Promise.all(units)) as HandleResult[];
      expect(savepoints(log).length).toBeGreaterThanOrEqual(2);
      expect(results.map((r) => r.outcome).sort()).toEqual(['duplicate', 'started']);
      const row = await rowsOf(db().orm).saga(fresh);
      expect(row).toMatchObject({ counter: 1, version: 0 });
      expect(await rowsOf(db().orm).handledMessages(row!.id)).toHaveLength(1);
    });

    it('one message id delivered twice in one group to an existing saga: one handled, one duplicate', async () => {
      const gate = new StepGate(2);
      const saga = gatedSaga(gate);
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const [a, s] = ['a', 's'].map((n) => uniqueKey(`dupold-${n}`)) as [string, string];
      for (const key of [a, s]) await plain.handle(saga, { type: 'Start', key });
      const { runtime, hold } = await groupedRuntime(saga);
      const units = [
        runtime.handle(saga, { type: 'Do', key: s, inc: 1, gated: true }, { messageId: 'm-2' }),
        runtime.handle(saga, { type: 'Do', key: s, inc: 1, gated: true }, { messageId: 'm-2' }),
      ].map((p) => p.catch((error: unknown) => error));
      await inOneGroup(runtime, saga, hold, gate, a);
      const results = (await Promise.all(units)) as HandleResult[];
      expect(results.map((r) => r.outcome).sort()).toEqual(['duplicate', 'handled']);
      expect(await rowsOf(db().orm).saga(s)).toMatchObject({ counter: 1, version: 1 });
    });
  });
}
