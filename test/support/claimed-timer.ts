import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import type { SagaTimer, TimerDelivery } from '../../src/index.js';

/**
 * Claims the pending `timer` as a dispatcher would (a token of its own, leased ten minutes ahead) and returns the
 * delivery that dispatcher would hand to `runtime.deliverTimer`, carrying `payload`. With `lost`, another
 * dispatcher took the timer over meanwhile: the row holds another token than the delivery.
 */
export async function claimTimer(
  orm: MikroORM,
  timer: SagaTimer,
  payload: unknown,
  { lost = false }: { readonly lost?: boolean } = {},
): Promise<TimerDelivery> {
  const token = randomUUID();
  await orm.em
    .fork()
    .getConnection()
    .execute('update saga_timer set token = ?, locked_until = ? where id = ?', [
      lost ? randomUUID() : token,
      new Date(Date.now() + 600_000),
      timer.id,
    ]);
  return {
    id: timer.id,
    token,
    sagaType: timer.sagaType,
    sagaId: timer.sagaId,
    name: timer.name,
    messageType: timer.messageType,
    payload,
    dueAt: timer.dueAt,
    attempts: 0,
    correlationId: null,
  };
}
