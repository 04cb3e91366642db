// How many outbox publishes a dispatcher keeps in flight: `publishConcurrency` (100 by default, or `concurrency`
// when only that is set), apart from the timer deliveries' own limit.
import { describe, expect, it } from 'vitest';
import { SagaDefinitionError, SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { deferred, useDatabase } from '../support/suite.js';

const SAGAS = 15;

for (const dialect of DIALECTS) {
  describe(`publishes in flight (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    /** Starts `SAGAS` sagas, each sending one message; returns a runtime on the fake clock. */
    async function seeded(clock: FakeClock): Promise<SagaRuntime> {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      for (let n = 0; n < SAGAS; n++) {
        await runtime.handle(scriptedSaga, { type: 'Start', key: `s${n}`, actions: [{ op: 'send', message: { type: 'Hello', n } }] });
      }
      return runtime;
    }

    /** Runs one pass whose publisher holds every message until `until` are in flight, or the pass ends. */
    async function inFlightAtOnce(options: { concurrency?: number; publishConcurrency?: number }, until: number) {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = await seeded(clock);
      const gate = deferred();
      let inFlight = 0;
      let most = 0;
      const dispatcher = new SagaDispatcher({
        runtime,
        clock,
        logger: silentLogger,
        batchSize: SAGAS,
        ...options,
        publish: async () => {
          most = Math.max(most, ++inFlight);
          if (most >= until) gate.resolve();
          await gate.promise;
          inFlight--;
        },
      });
      const pass = dispatcher.runOnce();
      // Every delivery the pool allows has started once the publisher calls stop coming: release them then.
      for (let turn = 0; turn < 50 && most < until; turn++) await new Promise<void>((resolve) => setImmediate(resolve));
      gate.resolve();
      expect((await pass).outbox).toMatchObject({ claimed: SAGAS, published: SAGAS });
      expect((await rowsOf(db().orm).outbox()).every((row) => row.outcome === 'published')).toBe(true);
      return { most, options: dispatcher.options };
    }

    it('by default publishes every claimed message of different sagas at once, past the 10 timer deliveries', async () => {
      const { most, options } = await inFlightAtOnce({}, SAGAS);
      expect(most).toBe(SAGAS);
      expect(options).toMatchObject({ concurrency: 10, publishConcurrency: 100 });
    });

    it('`concurrency` alone limits the publishes too; `publishConcurrency` limits them alone', async () => {
      expect(await inFlightAtOnce({ concurrency: 3 }, SAGAS)).toMatchObject({ most: 3, options: { publishConcurrency: 3 } });
      expect(await inFlightAtOnce({ concurrency: 3, publishConcurrency: 5 }, SAGAS)).toMatchObject({
        most: 5,
        options: { concurrency: 3, publishConcurrency: 5 },
      });
    });

    it('`publishConcurrency` is refused unless a positive integer, with OPTION_INVALID naming it', () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      for (const publishConcurrency of [0, -1, 1.5, Number.NaN]) {
        const attempt = () => new SagaDispatcher({ runtime, publishConcurrency });
        expect(attempt).toThrow(SagaDefinitionError);
        expect(attempt).toThrow(/publishConcurrency must be a positive integer/);
      }
      expect(SagaDispatcher.defaults.publishConcurrency).toBe(100);
    });
  });
}
