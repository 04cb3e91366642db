/**
 * The article's five scenarios, each on a fresh order, with timers firing through the dispatcher.
 * Every scenario returns its trace and closing line.
 */
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import { type OrderMessage, PAYMENT_TIMEOUT_MS, SHIPMENT_TIMEOUT_MS } from './order-saga.js';
import { OrderWorld } from './world.js';

export interface ScenarioRun {
  readonly title: string;
  readonly final: string;
  readonly lines: readonly string[];
}

const placed = (orderId: string): OrderMessage => ({ type: 'OrderPlaced', orderId, total: 60, books: ['Dune', 'Dune'] });

/**
 * Each scenario's clock starts a day before the previous one's: a saga a scenario leaves waiting (D) keeps
 * a pending timer, and it must not come due in a later scenario's world, which shares the database.
 */
const startOf = (letter: string) => new Date(Date.UTC(2026, 0, 15 - (letter.charCodeAt(0) - 65), 10, 5));

async function scenario(title: string, run: (orderId: string, start: Date) => Promise<OrderWorld>): Promise<ScenarioRun> {
  console.log(title);
  const orderId = randomUUID();
  const world = await run(orderId, startOf(title));
  return { title, final: await world.final(orderId), lines: world.lines };
}

/** A) Happy path, then a duplicate PaymentCaptured. */
export const happyPathThenDuplicate = (orm: MikroORM) =>
  scenario('A) Happy path, then a duplicate PaymentCaptured', async (orderId, start) => {
    const world = new OrderWorld(orm, start);
    await world.deliver(placed(orderId));
    // The payment provider redelivers its reply after the saga completed.
    await world.deliver({ type: 'PaymentCaptured', orderId, amount: 60 });
    return world;
  });

/** B) The provider captured, but its reply was lost: the timeout asks instead of compensating. */
export const captureReplyLost = (orm: MikroORM) =>
  scenario('B) The provider captured, but its reply was lost', async (orderId, start) => {
    const world = new OrderWorld(orm, start).withParticipants({
      CapturePayment: (_c, say) => {
        say('[payments] captured, but the reply was lost');
        return [];
      },
      CheckPaymentStatus: (c) => [{ type: 'PaymentCaptured', orderId: c.orderId, amount: 60 }],
    });
    await world.deliver(placed(orderId));
    world.say(`${(PAYMENT_TIMEOUT_MS + 1_000) / 1_000} s later the timeout fires`);
    await world.advance(PAYMENT_TIMEOUT_MS + 1_000);
    return world;
  });

/** C) The request never arrived; the capture shows up late and the refund fails. */
export const lateCaptureRefundFails = (orm: MikroORM) =>
  scenario('C) Request never arrived; the capture shows up late and the refund fails', async (orderId, start) => {
    const world = new OrderWorld(orm, start).withParticipants({
      CapturePayment: (_c, say) => {
        say('[payments] request never reached the provider');
        return [];
      },
      CheckPaymentStatus: (c) => [{ type: 'PaymentFailed', orderId: c.orderId }],
      RefundPayment: (c) => [{ type: 'RefundFailed', orderId: c.orderId, reason: 'card account closed' }],
    });
    await world.deliver(placed(orderId));
    world.say(`${(PAYMENT_TIMEOUT_MS + 1_000) / 1_000} s later the timeout fires`);
    await world.advance(PAYMENT_TIMEOUT_MS + 1_000);
    world.say('...the provider processes the original request after all');
    await world.deliver({ type: 'PaymentCaptured', orderId, amount: 60 });
    return world;
  });

/** D) PaymentCaptured and the payment timeout race in two units of work. */
export const paymentRacesTimeout = (orm: MikroORM) =>
  scenario('D) PaymentCaptured and the payment timeout race', async (orderId, start) => {
    let racing = false;
    let loadedCount = 0;
    let bothLoaded!: () => void;
    const loaded = new Promise<void>((resolve) => {
      bothLoaded = resolve;
    });
    let captureSaved!: () => void;
    const saved = new Promise<void>((resolve) => {
      captureSaved = resolve;
    });
    let timeoutHeld = false;
    const world: OrderWorld = new OrderWorld(orm, start, {
      // Both units of work read the saga before either writes; the timer's unit then waits until the
      // payment's unit has committed, so its own commit meets a newer version.
      afterLoad: async (message, saga) => {
        if (!racing) return;
        const isTimeout = message.type === 'SagaTimedOut' && !timeoutHeld;
        if (message.type !== 'PaymentCaptured' && !isTimeout) return;
        if (isTimeout) timeoutHeld = true;
        if (++loadedCount === 2) bothLoaded();
        await loaded;
        if (message.type === 'PaymentCaptured') world.say(`both handlers loaded version ${saga.version}, step ${saga.step}`);
        if (isTimeout) await saved;
      },
    }).withParticipants({
      CapturePayment: (_c, say) => {
        say('[payments] captured, but the reply was lost');
        return [];
      },
      CreateShipment: () => [],
    });
    await world.deliver(placed(orderId));
    racing = true;
    world.say(`${(PAYMENT_TIMEOUT_MS + 1_000) / 1_000} s later the timeout fires just as the provider redelivers its reply`);
    world.clock.advance(PAYMENT_TIMEOUT_MS + 1_000);
    const firing = world.dispatcher.runOnce();
    const capture = await world.runtime.handle(world.runtime.definition('order')!, { type: 'PaymentCaptured', orderId, amount: 60 });
    world.say(`handler 1 (PaymentCaptured) saved: ${capture.step}, version ${capture.version}`);
    captureSaved();
    await firing;
    const lost = world.timerResults.at(-1)!;
    world.say(
      `handler 2 (SagaTimedOut) lost the race: ${lost.conflicts} concurrency conflict, retried on fresh state, timer ${lost.outcome}`,
    );
    return world;
  });

/** E) The carrier API stays down: three shipment attempts, then a human is alerted. */
export const carrierStaysDown = (orm: MikroORM) =>
  scenario('E) The carrier API stays down', async (orderId, start) => {
    const world = new OrderWorld(orm, start).withParticipants({
      CreateShipment: (_c, say) => {
        say('[shipping] carrier API timed out');
        return [];
      },
    });
    await world.deliver(placed(orderId));
    for (let attempt = 0; attempt < 3; attempt++) await world.advance(SHIPMENT_TIMEOUT_MS + 1_000);
    return world;
  });

/** Every scenario, in the article's order. */
export const SCENARIOS = [happyPathThenDuplicate, captureReplyLost, lateCaptureRefundFails, paymentRacesTimeout, carrierStaysDown] as const;
