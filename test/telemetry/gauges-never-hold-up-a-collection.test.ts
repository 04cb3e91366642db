// The SDK collects every instrument of the application at once, and a pull exporter (Prometheus) gives the whole
// scrape up when it is slow. So a collection waits for the gauges' reading at most 5 s of the dispatcher's clock: a
// reading still waiting (for a pooled connection, for a database that does not answer) reports nothing then, is
// logged once, and goes on; when it ends, the next collection reports it, whatever its age. A reading waiting when
// the ORM is closed ends at once, reporting nothing and logging nothing. Real SDK, every database.

import type { MikroORM } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { SagaRuntime, silentLogger } from '../../src/index.js';
import { SagaGauges } from '../../src/telemetry/saga-gauges.js';
import { FakeClock } from '../../src/testing/index.js';
import type { Clock } from '../../src/time/clock.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';
import { useTelemetry } from '../support/telemetry.js';

const telemetry = useTelemetry();

/** A fake clock that says when something sleeps on it: a collection then waits for the reading. */
function watchedClock() {
  const fake = new FakeClock();
  let asked = deferred();
  const clock: Clock = {
    now: () => fake.now(),
    sleep: (ms, signal) => {
      asked.resolve();
      return fake.sleep(ms, signal);
    },
  };
  return {
    fake,
    clock,
    /** Resolves when the next collection waits on the clock. */
    waiting: () => {
      const current = asked;
      return current.promise.then(() => {
        asked = deferred();
      });
    },
  };
}

/** Holds `orm`'s only connection in a transaction until the returned release() is called. */
async function holdOnlyConnection(orm: MikroORM) {
  const holding = deferred();
  const release = deferred();
  const held = orm.em.fork().transactional(async (em) => {
    await em.getConnection().execute('select 1', [], 'all', em.getTransactionContext());
    holding.resolve();
    await release.promise;
  });
  await holding.promise;
  return async () => {
    release.resolve();
    await held.catch(() => undefined);
  };
}

for (const dialect of DIALECTS) {
  describe(`the gauges never hold up a collection (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    async function gaugesOnOneConnection() {
      const orm = await db().openAnother({ pool: { min: 0, max: 1 } });
      const { fake, clock, waiting } = watchedClock();
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock, verifySchema: false });
      const warnings: string[] = [];
      const logger = { ...silentLogger, warn: (line: string) => void warnings.push(line) };
      const gauges = new SagaGauges({ db: runtime.context, sagas: runtime.gaugedSagas(), clock, logger, cacheMs: 15_000 });
      return { orm, fake, waiting, runtime, warnings, gauges };
    }

    it('a reading waiting for a connection: the collection reports none after 5 s, the next one the late reading', async () => {
      const { orm, fake, waiting, runtime, warnings, gauges } = await gaugesOnOneConnection();
      const before = (await orm.em.fork().count(ScriptedSaga, { completedAt: null })) as number;
      await runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('late') });
      gauges.start();
      const release = await holdOnlyConnection(orm);
      try {
        let collecting = telemetry().collect();
        await waiting();
        fake.advance(5_000);
        const collected = await collecting;
        expect(collected.has('saga.active')).toBe(false);
        expect(collected.errors).toEqual([]);
        expect(warnings).toEqual([expect.stringMatching(/^gauges: reading active sagas and backlogs has not ended after 5000 ms/)]);

        // Still waiting: the next collection waits as long again, and it is not logged again.
        collecting = telemetry().collect();
        await waiting();
        fake.advance(5_000);
        expect((await collecting).has('saga.active')).toBe(false);
        expect(warnings).toHaveLength(1);

        await release();
        await gauges.read();
        await runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('after') });
        fake.advance({ minutes: 1 });
        // The late reading (taken before the last saga started), though older than cacheMs: no collection had it.
        expect((await telemetry().collect()).gauge('saga.active', { 'saga.type': 'scripted' })).toBe(before + 1);
        expect((await telemetry().collect()).gauge('saga.active', { 'saga.type': 'scripted' })).toBe(before + 2);
      } finally {
        gauges.stop();
        await release();
        await orm.close(true);
      }
    });

    it('a reading waiting when the ORM is closed ends at once: nothing reported, nothing logged', async () => {
      const { orm, warnings, gauges } = await gaugesOnOneConnection();
      gauges.start();
      const release = await holdOnlyConnection(orm);
      try {
        const reading = gauges.read();
        const closing = orm.close(true);
        // No clock advance: the reading itself ends with the close.
        expect(await reading).toBeUndefined();
        expect((await telemetry().collect()).has('saga.active')).toBe(false);
        await release();
        await closing;
        expect(warnings).toEqual([]);
      } finally {
        gauges.stop();
        await release();
      }
    });
  });
}
