// Each run of a step gets a message of its own: what a step does to its message, no other saga of a route(), no
// later run after a conflict and no caller sees (docs/guarantees.md, "Input contract").
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, type HandledEvent, SagaDispatcher, SagaRuntime, SagaState, SagaStateSchema, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga, scriptedVariant } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** The message both sagas handle; the rewriting step changes every part of it. */
interface Placed {
  readonly type: 'Placed';
  readonly key: string;
  readonly items: string[];
  readonly note?: string;
}

/** Changes its message as a careless step would: the key, a new field, a nested array. */
function rewrite(message: { key: string; note?: string; items: string[] }): void {
  message.key = `${message.key}-rewritten`;
  message.note = 'rewritten';
  message.items.push('added');
}

/** A saga that records what its message said. */
class WitnessSaga extends SagaState {
  key!: string;
  saw: string = '';
}

const WitnessSagaSchema = defineEntity({
  class: WitnessSaga,
  extends: SagaStateSchema,
  tableName: 'witness_saga',
  properties: {
    key: { type: 'string', length: 100, fieldName: 'key', unique: true },
    saw: { type: 'text', fieldName: 'saw' },
  },
});

const witnessSaga = defineSaga<WitnessSaga, Placed>(witnessDefinitionInput());

/** The scripted saga with one step that records what its message said, then rewrites it. */
const rewriterSaga = scriptedVariant('Placed', (saga, m) => {
  saga.log += `${JSON.stringify(m)};`;
  rewrite(m as unknown as Placed & { key: string; note?: string });
});

for (const dialect of DIALECTS) {
  describe(`a step's message is its own (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, WitnessSagaSchema]);
    const witnessOf = (key: string) => db().orm.em.fork().findOne(WitnessSaga, { key });

    it("route(): a step that rewrites its message changes neither the next saga's correlation, nor its fields, nor the caller's object", async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [rewriterSaga, witnessSaga] });
      const key = uniqueKey('route');
      const message: Placed = { type: 'Placed', key, items: ['a'] };
      const results = await runtime.route(message);
      expect(results.map((r) => [r.sagaType, r.outcome])).toEqual([
        ['scripted', 'started'],
        ['witness', 'started'],
      ]);
      // The witness started on the key as sent (not the rewritten one) and read the message as sent.
      expect((await witnessOf(key))?.saw).toBe(JSON.stringify({ key, note: null, items: ['a'] }));
      expect(await witnessOf(`${key}-rewritten`)).toBeNull();
      expect(message).toEqual({ type: 'Placed', key, items: ['a'] });
    });

    it("route(): a correlation function that rewrites its message changes no other saga's message", async () => {
      const careless = defineSaga<WitnessSaga, Placed>({
        ...witnessDefinitionInput(),
        name: 'careless',
        correlation: {
          property: 'key',
          from: (m) => {
            const key = m.key;
            rewrite(m as Placed & { key: string });
            return key;
          },
        },
      });
      // The careless saga correlates first; the rewriter after it must read the message as sent.
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [careless, rewriterSaga] });
      const key = uniqueKey('correlate');
      await runtime.route({ type: 'Placed', key, items: ['a'] });
      expect((await rowsOf(db().orm).saga(key))?.log).toBe(`${JSON.stringify({ type: 'Placed', key, items: ['a'] })};`);
    });

    it("handle(): the caller's object is not the step's, and onHandled gets it as it was passed", async () => {
      const events: HandledEvent[] = [];
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [rewriterSaga], onHandled: (event) => events.push(event) });
      const key = uniqueKey('handle');
      const message: Placed = { type: 'Placed', key, items: ['a'] };
      await runtime.handle(rewriterSaga, message);
      expect(message).toEqual({ type: 'Placed', key, items: ['a'] });
      expect(events[0]?.message).toBe(message);
      // Handled again: the step found the saga by the key as sent, and read the message as sent.
      const again = await runtime.handle(rewriterSaga, message);
      expect(again).toMatchObject({ outcome: 'handled' });
      const sent = JSON.stringify({ type: 'Placed', key, items: ['a'] });
      expect((await rowsOf(db().orm).saga(key))?.log).toBe(`${sent};${sent};`);
    });

    it('a step re-run after a conflict reads the message as it came, not as its first run left it', async () => {
      const orm = db().orm;
      const key = uniqueKey('retry');
      const plain = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      await plain.handle(scriptedSaga, { type: 'Start', key });
      const seen: string[] = [];
      const unlucky = scriptedVariant('Placed', async (saga, m, ctx) => {
        seen.push(JSON.stringify(m));
        rewrite(m as unknown as Placed & { key: string });
        saga.counter += 1;
        ctx.send({ type: 'Seen', message: m });
        // The first run lets another unit of work commit first: a conflict, so the step runs again.
        if (seen.length === 1) await plain.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      });
      const runtime = new SagaRuntime({ em: orm.em, sagas: [unlucky], concurrency: { baseDelayMs: 0 } });
      const result = await runtime.handle(unlucky, { type: 'Placed', key, items: ['a'] } as never);
      expect(result).toMatchObject({ outcome: 'handled', attempts: 2, conflicts: 1 });
      const asSent = JSON.stringify({ type: 'Placed', key, items: ['a'] });
      expect(seen).toEqual([asSent, asSent]);
      const [outbox] = await rowsOf(orm).outbox(result.sagaId!);
      expect(outbox?.payload).toEqual({
        type: 'Seen',
        message: { type: 'Placed', key: `${key}-rewritten`, note: 'rewritten', items: ['a', 'added'] },
      });
    });

    it("a timer's step that rewrites its message leaves the delivered payload as read", async () => {
      const clock = new FakeClock('2026-01-09T16:00:00.000Z');
      const events: HandledEvent[] = [];
      const tick = defineSaga<WitnessSaga, Placed | { type: 'Tick'; key: string; items: string[] }>({
        name: 'ticking',
        state: WitnessSaga,
        correlation: { property: 'key', from: { Placed: (m) => m.key } },
        startedBy: ['Placed'],
        steps: {
          Placed(_saga, m, ctx) {
            ctx.schedule('tick', 1_000, { type: 'Tick', key: m.key, items: ['a'] });
          },
          Tick(saga, m) {
            saga.saw = JSON.stringify(m.items);
            rewrite(m as { key: string; items: string[] });
          },
        },
      });
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [tick], clock, onHandled: (event) => events.push(event) });
      const key = uniqueKey('timer');
      await runtime.handle(tick, { type: 'Placed', key, items: [] });
      clock.advance(1_000);
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, publish: async () => {} });
      await dispatcher.runOnce();
      expect((await witnessOf(key))?.saw).toBe('["a"]');
      const delivered = events.find((event) => event.timer !== undefined);
      expect(delivered?.message).toEqual({ type: 'Tick', key, items: ['a'] });
      expect(delivered?.timer?.payload).toEqual({ type: 'Tick', key, items: ['a'] });
    });
  });
}

/** The witness saga's definition input, to derive variants from. */
function witnessDefinitionInput() {
  return {
    name: 'witness',
    state: WitnessSaga,
    correlation: { property: 'key' as const, from: (m: Placed) => m.key },
    startedBy: ['Placed' as const],
    steps: {
      Placed(saga: WitnessSaga, m: Placed) {
        saga.saw = JSON.stringify({ key: m.key, note: m.note ?? null, items: m.items });
      },
    },
  };
}
