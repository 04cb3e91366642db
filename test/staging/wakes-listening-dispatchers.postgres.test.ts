// On PostgreSQL, a staged row due at once wakes the dispatchers that LISTEN when the application's transaction commits:
// the NOTIFY is sent inside that transaction, so PostgreSQL delivers it at COMMIT. A loop waiting after an empty pass
// then claims it at once, the clock not moving. A row staged with a delay sends none; the runtime's
// `notifyDispatchers: false` sends none either.
import { afterEach, describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { statementsSent } from '../support/pg-statements.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

const POLL_MS = 10_000;

describe("staged rows wake listening dispatchers at the application's COMMIT (postgresql)", () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const stops: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const stop of stops.splice(0)) await stop();
  });

  /** A dispatcher waiting after its first empty pass, listening; a runtime on an ORM instance of its own stages. */
  async function setup(notifyDispatchers?: boolean) {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
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
    const listening = new Promise<void>((resolve) => dispatcher.on('listening', resolve));
    dispatcher.start();
    await Promise.all([idle, listening]);
    const other = await db().openAnother();
    const stager = new SagaRuntime({ em: other.em, sagas: [scriptedSaga], clock, notifyDispatchers });
    const delivered = () => new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.inbox.delivered > 0 && resolve()));
    return { clock, published, dispatcher, other, stager, delivered };
  }

  it('a delivery staged and committed in another instance is delivered at once, the clock not moving', async () => {
    const { clock, other, stager, delivered } = await setup();
    const key = uniqueKey('woken');
    const at = clock.now().getTime();
    const done = delivered();
    const sent = await statementsSent(() =>
      other.em.fork().transactional(async (em) => {
        stager.stageDelivery(em, scriptedSaga, { type: 'Start', key });
      }),
    );
    // The NOTIFY went inside the application's transaction, with the saga key's lock, before the row's INSERT.
    const notify = sent.findIndex((sql) => sql.includes('pg_notify'));
    expect(sent[notify]).toContain('pg_advisory_xact_lock');
    expect(sent.findIndex((sql) => /^insert into "saga_inbox"/.test(sql))).toBeGreaterThan(notify);
    await done;
    expect(clock.now().getTime()).toBe(at);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ log: 'started;' });
  });

  it("the application's own message staged and committed is published at once", async () => {
    const { clock, published, dispatcher, other, stager } = await setup();
    const at = clock.now().getTime();
    const relayed = new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.outbox.published > 0 && resolve()));
    await other.em.fork().transactional(async (em) => {
      stager.stageMessage(em, { type: 'Woken' });
    });
    await relayed;
    expect(published.map((envelope) => envelope.type)).toEqual(['Woken']);
    expect(clock.now().getTime()).toBe(at);
  });

  it('a delayed row, or a runtime with notifyDispatchers: false, sends no NOTIFY; the rows wait for the poll', async () => {
    const { clock, other, stager, delivered } = await setup();
    const quiet = new SagaRuntime({ em: other.em, sagas: [scriptedSaga], clock, notifyDispatchers: false });
    const [later, silent] = [uniqueKey('later'), uniqueKey('silent')];
    const sent = await statementsSent(() =>
      other.em.fork().transactional(async (em) => {
        stager.stageDelivery(em, scriptedSaga, { type: 'Start', key: later }, { delay: 1 });
        quiet.stageDelivery(em, scriptedSaga, { type: 'Start', key: silent });
      }),
    );
    expect(sent.filter((sql) => sql.includes('pg_notify'))).toEqual([]);
    expect(sent.filter((sql) => sql.includes('pg_advisory_xact_lock'))).toHaveLength(2);
    const done = delivered();
    clock.advance(POLL_MS);
    await done;
    const rows = rowsOf(db().orm);
    expect(await rows.saga(silent)).not.toBeNull();
    expect(await rows.saga(later)).not.toBeNull();
  });
});
