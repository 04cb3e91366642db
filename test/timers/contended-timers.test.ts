// A timer whose unit of work keeps meeting concurrency conflicts on its saga (a hot saga) past the runtime's
// `concurrency.maxAttempts` is not a failed delivery: it is given back uncharged, backed off, and counted
// (`contended`, saga.timeout.contended). Real parallel units of work: two dispatchers on two runtimes fire timers of
// one saga at once; the first round's steps meet at a gate, so both read the same version. Both databases.
import { describe, expect, it } from 'vitest';
import { type DispatchPassResult, defineSaga, SagaDispatcher, SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { StepGate } from '../support/step-gate.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

type HotMessage = { readonly type: 'Start'; readonly key: string; readonly timers: number } | { readonly type: 'Tick' };

function hotSaga(gate: StepGate) {
  let gated = 2;
  return defineSaga<ScriptedSaga, HotMessage>({
    name: 'scripted',
    state: ScriptedSaga,
    correlation: { property: 'key', from: { Start: (m) => m.key } },
    startedBy: ['Start'],
    steps: {
      Start(_saga, message, ctx) {
        for (let i = 0; i < message.timers; i++) ctx.schedule(`hot-${i}`, 1_000 + i, { type: 'Tick' });
      },
      async Tick(saga) {
        // The first two steps wait for each other: both units read the saga at the same version.
        if (gated-- > 0) await gate.enter();
        saga.counter += 1;
      },
    },
  });
}

for (const dialect of DIALECTS) {
  describe(`timers of a saga that stays busy (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('conflicts past the runtime’s retries are not charged: with maxAttempts 2 no timer is dead-lettered, every one fires', {
      timeout: 30_000,
    }, async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const gate = new StepGate(2);
      void gate.all.promise.then(() => gate.go.resolve()); // both steps read the saga, then both write
      const saga = hotSaga(gate);
      const key = uniqueKey('hot');
      const timers = 6;
      await new SagaRuntime({ em: db().orm.em, sagas: [saga], clock }).handle(saga, { type: 'Start', key, timers });
      clock.advance(60_000);
      const lines: string[] = [];
      const dispatcher = () =>
        new SagaDispatcher({
          // One attempt per unit of work: the first conflict ends it. No group commit: each unit its own transaction.
          runtime: new SagaRuntime({ em: db().orm.em, sagas: [saga], clock, concurrency: { maxAttempts: 1 }, groupCommit: false }),
          clock,
          batchSize: 1,
          maxAttempts: 2,
          logger: { debug: () => undefined, info: () => undefined, warn: (l) => void lines.push(l), error: (l) => void lines.push(l) },
        });
      const [d1, d2] = [dispatcher(), dispatcher()];
      const passes: DispatchPassResult[] = [];
      for (let round = 0; round < 40 && (await rowsOf(db().orm).pendingTimers()).length > 0; round++) {
        passes.push(...(await Promise.all([d1.runOnce(), d2.runOnce()])));
        clock.advance(300_000); // past the longest retry delay
      }
      const rows = await rowsOf(db().orm).timers();
      expect(rows.map((row) => [row.outcome, row.attempts, row.lastError])).toEqual(
        Array.from({ length: timers }, () => ['fired', 0, null]),
      );
      const contended = passes.reduce((sum, pass) => sum + pass.timers.contended, 0);
      expect(contended).toBeGreaterThanOrEqual(1); // the first round: one of the two units conflicted
      expect(passes.reduce((sum, pass) => sum + pass.timers.failed + pass.timers.deadLettered, 0)).toBe(0);
      expect(d1.stats().timersContended + d2.stats().timersContended).toBe(contended);
      expect(lines.some((line) => line.includes('its saga stayed busy'))).toBe(true);
      await d1.stop();
      await d2.stop();
    });
  });
}
