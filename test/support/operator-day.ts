import type { MikroORM } from '@mikro-orm/core';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { advanceAndDrain, FakeClock } from '../../src/testing/index.js';
import { scriptedSaga } from '../fixtures/scripted-saga.js';

/** The day docs/operations.md starts from, on the fake clock. */
export const OPERATOR_DAY_START = '2026-11-30T09:00:00Z';

/**
 * The database an operator finds in the morning (docs/operations.md "An operator's day"), built through the
 * runtime and the dispatcher on a fake clock from {@link OPERATOR_DAY_START}:
 * - `order-1041` is stuck: its `payment-timeout` failed twice ("payment service unavailable") and was dead-lettered;
 * - `order-1042` waits, its `payment-timeout` pending until tomorrow;
 * - `order-1040` completed; the `ConfirmOrder` messages of all three were published.
 */
export async function seedOperatorDay(orm: MikroORM): Promise<void> {
  const clock = new FakeClock(OPERATOR_DAY_START);
  const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
  const failing = { type: 'Tick', key: 'order-1041', actions: [{ op: 'throw', message: 'payment service unavailable' }] };
  const start = (key: string, after: number | { minutes: number } | { days: number }, message?: Record<string, unknown>) =>
    runtime.handle(scriptedSaga, {
      type: 'Start',
      key,
      actions: [
        { op: 'schedule', name: 'payment-timeout', after, message },
        { op: 'send', message: { type: 'ConfirmOrder', orderId: key } },
      ],
    });
  await start('order-1040', { days: 1 });
  await runtime.handle(scriptedSaga, { type: 'Do', key: 'order-1040', actions: [{ op: 'stage', stage: 'paid' }, { op: 'complete' }] });
  await clock.advance({ minutes: 5 });
  await start('order-1041', { minutes: 15 }, failing);
  await clock.advance({ minutes: 5 });
  await start('order-1042', { days: 1 });
  const dispatcher = new SagaDispatcher({ runtime, publish: async () => {}, maxAttempts: 2, logger: silentLogger });
  await advanceAndDrain(clock, dispatcher, { minutes: 10 }); // ConfirmOrder x3 published; order-1041's timer fails once
  await advanceAndDrain(clock, dispatcher, { minutes: 10 }); // ... and again: dead-lettered
}
