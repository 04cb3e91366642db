// Completed sagas on every database: what a step of a completed saga can do, and what ctx.completed says.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import {
  defineSaga,
  SagaDefinitionError,
  SagaDispatcher,
  SagaRuntime,
  SagaState,
  SagaStateSchema,
  SagaValidationError,
  silentLogger,
} from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** The reference article's tail: a cancelled order completes; a late capture must still be refunded in time. */
class RefundSaga extends SagaState {
  orderId!: string;
  status: string = 'Open';
  seen: string = '';
}

const RefundSagaSchema = defineEntity({
  class: RefundSaga,
  extends: SagaStateSchema,
  tableName: 'refund_saga',
  properties: {
    orderId: { type: 'string', length: 100, fieldName: 'order_id', unique: true },
    status: { type: 'string', length: 30, fieldName: 'status' },
    seen: { type: 'text', fieldName: 'seen' },
  },
});

type RefundMessage =
  | { readonly type: 'OrderPlaced'; readonly orderId: string }
  | { readonly type: 'OrderCancelled'; readonly orderId: string }
  | { readonly type: 'PaymentCaptured'; readonly orderId: string; readonly reopen: boolean }
  | { readonly type: 'RefundDeadline'; readonly orderId: string };

const refundSaga = defineSaga<RefundSaga, RefundMessage>({
  name: 'refund',
  state: RefundSaga,
  correlation: { property: 'orderId', from: (m) => m.orderId },
  startedBy: ['OrderPlaced'],
  stepProperty: 'status',
  handleCompleted: ['PaymentCaptured'],
  steps: {
    OrderPlaced() {},
    OrderCancelled(saga, _m, ctx) {
      saga.status = 'Cancelled';
      ctx.complete();
    },
    PaymentCaptured(saga, m, ctx) {
      saga.seen += `completed=${ctx.completed};`;
      if (m.reopen) ctx.reopen();
      saga.seen += `after-reopen=${ctx.completed};`;
      saga.status = 'Refunding';
      ctx.schedule('refund-deadline', { hours: 1 }, { type: 'RefundDeadline', orderId: saga.orderId });
    },
    RefundDeadline(saga, _m, ctx) {
      saga.status = 'RefundOverdue';
      ctx.complete();
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`completed sagas (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, RefundSagaSchema]);
    const setup = () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [refundSaga], clock });
      return { clock, runtime };
    };
    const cancelled = async (runtime: SagaRuntime) => {
      const orderId = uniqueKey('order');
      await runtime.handle(refundSaga, { type: 'OrderPlaced', orderId });
      await runtime.handle(refundSaga, { type: 'OrderCancelled', orderId });
      return orderId;
    };
    const row = (orderId: string) => db().orm.em.fork().findOne(RefundSaga, { orderId });

    it('scheduling on a completed saga without reopening is SAGA_COMPLETED, not silently discarded; nothing written', async () => {
      const { runtime } = setup();
      const orderId = await cancelled(runtime);
      const before = await row(orderId);
      const error = await runtime.handle(refundSaga, { type: 'PaymentCaptured', orderId, reopen: false }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaValidationError);
      expect(error).toMatchObject({ code: 'SAGA_COMPLETED', details: { timerName: 'refund-deadline' } });
      expect((error as Error).message).toContain('ctx.reopen()');
      expect(await row(orderId)).toEqual(before);
      expect(await rowsOf(db().orm).timers({ sagaId: before!.id })).toEqual([]);
    });

    it('ctx.reopen() makes the saga active in the same unit of work; its refund deadline is kept and fires', async () => {
      const { runtime, clock } = setup();
      const orderId = await cancelled(runtime);
      const result = await runtime.handle(refundSaga, { type: 'PaymentCaptured', orderId, reopen: true });
      expect(result).toMatchObject({ outcome: 'handled', completed: false, changed: true, timersScheduled: 1, version: 2 });
      const reopened = await row(orderId);
      expect(reopened).toMatchObject({ status: 'Refunding', completedAt: null, seen: 'completed=true;after-reopen=false;' });
      const pending = await rowsOf(db().orm).pendingTimers(reopened!.id);
      expect(pending).toMatchObject([{ name: 'refund-deadline', step: 'Refunding' }]);

      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
      clock.advance({ hours: 1 });
      const pass = await dispatcher.runOnce();
      expect(pass.timers).toMatchObject({ fired: 1 });
      expect(await row(orderId)).toMatchObject({ status: 'RefundOverdue', completedAt: clock.now() });
      // Completed twice (cancelled, then refund overdue), each counted once; the reopening message is not a completion.
      expect(runtime.stats().completed).toBe(2);
    });

    it('ctx.completed is true inside a step of a saga completed before it, and after complete() in the step', async () => {
      const seen: boolean[] = [];
      const saga = defineSaga<RefundSaga, RefundMessage>({
        ...refundSagaInput(),
        handleCompleted: true,
        steps: {
          OrderPlaced(_s, _m, ctx) {
            seen.push(ctx.completed);
            ctx.complete();
            seen.push(ctx.completed);
          },
          OrderCancelled(_s, _m, ctx) {
            seen.push(ctx.completed);
          },
        },
      });
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga], clock: new FakeClock() });
      const orderId = uniqueKey('order');
      await runtime.handle(saga, { type: 'OrderPlaced', orderId });
      const late = await runtime.handle(saga, { type: 'OrderCancelled', orderId });
      expect(seen).toEqual([false, true, true]);
      expect(late).toMatchObject({ outcome: 'handled', completed: true, changed: false });
    });

    it('reopen() then complete() in one step leaves the saga completed and discards what it scheduled: nothing written', async () => {
      const saga = defineSaga<RefundSaga, RefundMessage>({
        ...refundSagaInput(),
        handleCompleted: true,
        steps: {
          OrderPlaced(_s, _m, ctx) {
            ctx.complete();
          },
          OrderCancelled(s, _m, ctx) {
            ctx.reopen();
            ctx.schedule('late', { hours: 1 }, { type: 'OrderPlaced', orderId: s.orderId });
            ctx.complete();
          },
        },
      });
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga], clock: new FakeClock() });
      const orderId = uniqueKey('order');
      await runtime.handle(saga, { type: 'OrderPlaced', orderId });
      const before = await row(orderId);
      const result = await runtime.handle(saga, { type: 'OrderCancelled', orderId });
      expect(result).toMatchObject({ completed: true, changed: false, timersScheduled: 0 });
      expect(await row(orderId)).toEqual(before);
      expect(await rowsOf(db().orm).timers({ sagaId: before!.id })).toEqual([]);
    });

    it('stepProperty must name a string property: SagaDefinitionError at registration', () => {
      const saga = defineSaga<RefundSaga, RefundMessage>({ ...refundSagaInput(), stepProperty: 'createdAt' });
      expect(() => new SagaRuntime({ em: db().orm.em, sagas: [saga] })).toThrow(SagaDefinitionError);
      expect(() => new SagaRuntime({ em: db().orm.em, sagas: [saga] })).toThrow(
        /stepProperty RefundSaga.createdAt must be a string property/,
      );
    });
  });
}

function refundSagaInput() {
  return {
    name: 'refund',
    state: RefundSaga,
    correlation: { property: 'orderId' as const, from: (m: RefundMessage) => m.orderId },
    startedBy: ['OrderPlaced' as const],
    steps: { OrderPlaced() {} },
  };
}
