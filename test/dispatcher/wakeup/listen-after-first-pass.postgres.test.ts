// A loop's first claim waits until its LISTEN connection listens (or could not): a message another ORM instance
// commits before (its NOTIFY reaching no one) is claimed by that first pass, and one committed after wakes the loop.
// The connection's opening is held by a gate on the ORM's connection, so the order is not left to timing.
import { afterEach, describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

const POLL_MS = 10_000;

describe('a LISTEN connection that comes up after the first pass (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** Holds the opening of connections outside the pool (the LISTEN connection) until `gate` resolves. */
  function holdListenConnection(gate: Promise<void>): void {
    const connection = db().orm.em.getConnection('write') as unknown as Record<string, unknown>;
    if (ORM_MAJOR === 6) {
      const client = (connection.getKnex as () => { client: Record<string, unknown> })().client;
      const open = client.acquireRawConnection as () => Promise<unknown>;
      client.acquireRawConnection = async function (this: unknown) {
        await gate;
        return open.call(this);
      };
      cleanups.push(() => {
        client.acquireRawConnection = open;
      });
    } else {
      // MikroORM 7 opens it as a client of its pg pool's class: that class, handed out by getNativeClient(), waits.
      type Pool = { Client: new (options: object) => { connect(): Promise<void> } };
      const native = connection.getNativeClient as () => Promise<Pool>;
      connection.getNativeClient = async function (this: unknown) {
        const pool = await native.call(this);
        class HeldClient extends pool.Client {
          override async connect(): Promise<void> {
            await gate;
            return super.connect();
          }
        }
        return new Proxy(pool, {
          get: (target, property) => {
            if (property === 'Client') return HeldClient;
            const value: unknown = Reflect.get(target, property, target);
            return typeof value === 'function' ? value.bind(target) : value;
          },
        });
      };
      cleanups.push(() => {
        connection.getNativeClient = native;
      });
    }
  }

  it("the loop's first claim waits until its connection listens: a message committed before is claimed, one after wakes it", async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const gate = deferred();
    holdListenConnection(gate.promise);
    const published: OutboxEnvelope[] = [];
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const dispatcher = new SagaDispatcher({
      runtime,
      clock,
      logger: silentLogger,
      pollIntervalMs: POLL_MS,
      publish: async (envelope) => void published.push(envelope),
    });
    cleanups.push(() => dispatcher.stop());
    const passes: number[] = [];
    dispatcher.on('pass', (pass) => passes.push(pass.outbox.published));
    const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
    dispatcher.start();
    const other = await db().openAnother();
    const elsewhere = new SagaRuntime({ em: other.em, sagas: [scriptedSaga], clock });
    const send = (type: string) =>
      elsewhere.handle(scriptedSaga, { type: 'Start', key: uniqueKey('listen'), actions: [{ op: 'send', message: { type } }] });
    // Its NOTIFY reaches no one: the connection is held back, and no pass has claimed yet.
    await send('BeforeListen');
    expect(passes).toEqual([]);
    gate.resolve();
    await idle;
    expect(published.map((envelope) => envelope.type)).toEqual(['BeforeListen']);
    // The clock does not move: only the NOTIFY can wake the waiting loop.
    const relayed = new Promise<void>((resolve) => dispatcher.on('pass', (pass) => pass.outbox.published > 0 && resolve()));
    await send('AfterListen');
    await relayed;
    expect(published.map((envelope) => envelope.type)).toEqual(['BeforeListen', 'AfterListen']);
  });
});
