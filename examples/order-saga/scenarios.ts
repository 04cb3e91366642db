/**
 * The article's scenarios, each on a fresh order. Every scenario returns its closing line.
 */
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import { FakeClock } from '../../src/testing/index.js';
import type { OrderMessage } from './order-saga.js';
import { OrderWorld } from './world.js';

export interface ScenarioRun {
  readonly title: string;
  readonly final: string;
  readonly lines: readonly string[];
}

const placed = (orderId: string): OrderMessage => ({ type: 'OrderPlaced', orderId, total: 60, books: ['Dune', 'Dune'] });

/** A) Happy path, then a duplicate PaymentCaptured. */
export async function happyPathThenDuplicate(orm: MikroORM): Promise<ScenarioRun> {
  const title = 'A) Happy path, then a duplicate PaymentCaptured';
  console.log(title);
  const world = new OrderWorld(orm, new FakeClock('2026-01-05T10:05:00Z'));
  const orderId = randomUUID();
  await world.deliver(placed(orderId));
  // The payment provider redelivers its reply after the saga completed.
  await world.deliver({ type: 'PaymentCaptured', orderId, amount: 60 });
  return { title, final: await world.final(orderId), lines: world.lines };
}

/** D) PaymentCaptured and the payment timeout race in two units of work. */
export async function paymentRacesTimeout(orm: MikroORM): Promise<ScenarioRun> {
  const title = 'D) PaymentCaptured and the payment timeout race';
  console.log(title);
  const orderId = randomUUID();
  let bothLoaded!: () => void;
  const loaded = new Promise<void>((resolve) => {
    let count = 0;
    bothLoaded = () => {
      if (++count === 2) resolve();
    };
  });
  let captureSaved!: () => void;
  const saved = new Promise<void>((resolve) => {
    captureSaved = resolve;
  });
  let racing = false;
  let firstTimeoutAttempt = true;
  const world = new OrderWorld(orm, new FakeClock('2026-01-05T10:05:00Z'), {
    // Both handlers read the saga before either writes; the timeout handler then waits until the payment
    // handler has committed, so its own commit meets a newer version.
    afterLoad: async (message, saga) => {
      if (!racing) return;
      if (message.type === 'PaymentCaptured' || (message.type === 'SagaTimedOut' && firstTimeoutAttempt)) {
        bothLoaded();
        await loaded;
        if (message.type === 'PaymentCaptured') world.say(`both handlers loaded version ${saga.version}, step ${saga.step}`);
      }
      if (message.type === 'SagaTimedOut' && firstTimeoutAttempt) {
        firstTimeoutAttempt = false;
        await saved;
      }
    },
  }).withParticipants({
    CapturePayment: (_c, say) => {
      say('[payments] captured, but the reply was lost');
      return [];
    },
  });
  await world.deliver(placed(orderId));
  racing = true;
  const capture: OrderMessage = { type: 'PaymentCaptured', orderId, amount: 60 };
  const timeout: OrderMessage = { type: 'SagaTimedOut', orderId, step: 'CapturingPayment' };
  const first = world.runtime.handle(world.runtime.definition('order')!, capture).then((result) => {
    world.say(`handler 1 (PaymentCaptured) saved: ${result.step}, version ${result.version}`);
    captureSaved();
    return result;
  });
  const second = world.runtime.handle(world.runtime.definition('order')!, timeout);
  const [, lost] = await Promise.all([first, second]);
  world.say(
    `handler 2 (SagaTimedOut) lost the race: ${lost.conflicts} concurrency conflict, retried on fresh state (${lost.attempts} attempts)`,
  );
  world.trace(timeout, lost);
  return { title, final: await world.final(orderId), lines: world.lines };
}

/** Every scenario that runs without the dispatcher, in the article's order. */
export const SCENARIOS = [happyPathThenDuplicate, paymentRacesTimeout] as const;
