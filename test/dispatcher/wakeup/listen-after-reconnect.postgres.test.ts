// A dispatcher left running while its ORM is closed and connected again (`orm.close()`, then `orm.reconnect()`,
// which docs/integration.md says makes the runtime usable again): once reconnected, commits of other processes
// wake its loop again through LISTEN/NOTIFY, as they did before the close.
import { afterEach, describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 10_000;

describe('LISTEN after orm.reconnect() (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it('a running dispatcher whose ORM was closed and reconnected is woken by another instance’s commit again', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const mine = await db().openAnother();
    const published: OutboxEnvelope[] = [];
    const runtime = new SagaRuntime({ em: mine.em, sagas: [scriptedSaga], clock });
    const dispatcher = new SagaDispatcher({
      runtime,
      clock,
      logger: silentLogger,
      pollIntervalMs: POLL_MS,
      publish: async (envelope) => void published.push(envelope),
    });
    cleanups.push(() => dispatcher.stop());
    const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
    let listened = 0;
    const listening = [deferred(), deferred()];
    dispatcher.on('listening', () => listening[listened++]?.resolve());
    dispatcher.start();
    await Promise.all([idle, listening[0]!.promise]);
    await mine.close();
    await mine.reconnect();
    // It listens again once the ORM is connected again; the clock does not move: only a wake can publish.
    await listening[1]!.promise;
    const other = await db().openAnother();
    const elsewhere = new SagaRuntime({ em: other.em, sagas: [scriptedSaga], clock });
    const relayed = new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.outbox.published > 0 && resolve()));
    await elsewhere.handle(scriptedSaga, {
      type: 'Start',
      key: uniqueKey('reconnect'),
      actions: [{ op: 'send', message: { type: 'AfterReconnect' } }],
    });
    await relayed;
    expect(published.map((envelope) => envelope.type)).toEqual(['AfterReconnect']);
    expect(listened).toBe(2);
  });
});
