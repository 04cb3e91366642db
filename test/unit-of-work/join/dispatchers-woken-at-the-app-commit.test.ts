// The rows a joined unit writes due at once (an outbox message, a timer due now) reach a waiting dispatcher only once
// the application commits. On PostgreSQL the unit sends NOTIFY inside the application's transaction, which PostgreSQL
// delivers at its COMMIT: the dispatcher (it listens by default) claims them at once. The in-process wake-up cannot
// know when the application commits, so on SQLite the dispatcher finds them at its next poll. Time only moves when
// the test moves the clock.
import { afterEach, describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { drainContinuations } from '../../support/flush-hold.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 10_000;

for (const dialect of DIALECTS) {
  describe(`a waiting dispatcher and a joined unit's rows due at once (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const stops: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const stop of stops.splice(0)) await stop();
    });

    it(
      dialect === 'postgresql' ? 'are published at the commit, the clock not moving' : 'are published at the next poll after the commit',
      async () => {
        const clock = new FakeClock('2026-03-02T09:00:00.000Z');
        const published: OutboxEnvelope[] = [];
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
        const dispatcher = new SagaDispatcher({
          runtime,
          clock,
          logger: silentLogger,
          pollIntervalMs: POLL_MS,
          publish: async (envelope) => void published.push(envelope),
        });
        stops.push(() => dispatcher.stop());
        const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
        const listening = dialect === 'postgresql' ? new Promise<void>((resolve) => dispatcher.on('listening', resolve)) : undefined;
        dispatcher.start();
        await Promise.all([idle, listening]);
        const relayed = new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.outbox.published > 0 && resolve()));

        const em = db().orm.em.fork();
        await em.begin();
        await runtime.handle(
          scriptedSaga,
          { type: 'Start', key: uniqueKey('woken'), actions: [{ op: 'send', message: { type: 'Joined' } }] },
          { em },
        );
        await drainContinuations();
        expect(published).toEqual([]);
        await em.commit();
        if (dialect !== 'postgresql') {
          for (let turn = 0; turn < 5; turn++) await drainContinuations();
          expect(published).toEqual([]);
          clock.advance(POLL_MS);
        }
        await relayed;
        expect(published.map((envelope) => envelope.type)).toEqual(['Joined']);
        if (dialect === 'postgresql') expect(clock.now().toISOString()).toBe('2026-03-02T09:00:00.000Z');
      },
    );
  });
}
