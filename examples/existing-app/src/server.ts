/**
 * The app's HTTP server with the saga dispatcher beside it. Prints one JSON line per event on stdout
 * (`listening`, `published`, `stopped`) and stops cleanly on SIGTERM: the server stops accepting requests,
 * the dispatcher finishes its deliveries, then the ORM closes and the process exits with code 0.
 *
 *   PORT=3000 node dist/server.js          # PORT=0 picks a free port (printed in the `listening` line)
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { MikroORM } from '@mikro-orm/core';
import { SagaDispatcher, SagaError, SagaRuntime } from 'mikro-orm-saga';
import config from './mikro-orm.config.js';
import { Customer } from './modules/customer/customer.entity.js';
import { orderSaga } from './modules/order/order-saga.js';

const log = (event: string, fields: Record<string, unknown> = {}) => console.log(JSON.stringify({ event, ...fields }));

const orm = await MikroORM.init(config);
const sagas = new SagaRuntime({ em: orm.em, sagas: [orderSaga] });
const dispatcher = new SagaDispatcher({
  runtime: sagas,
  pollIntervalMs: Number(process.env.DISPATCH_POLL_MS ?? 1_000),
  // A real app hands the message to its broker here; this one prints it.
  publish: async (envelope) => log('published', { type: envelope.type, payload: envelope.payload, id: envelope.id }),
});

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  let body = '';
  for await (const chunk of req) body += chunk;
  const value: unknown = JSON.parse(body || '{}');
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

async function route(req: IncomingMessage): Promise<[number, unknown]> {
  const body = req.method === 'POST' ? await readJson(req) : {};
  const text = (key: string) => (typeof body[key] === 'string' ? (body[key] as string) : '');
  const em = orm.em.fork();
  if (req.method === 'POST' && req.url === '/customers') {
    await em.persist(em.create(Customer, { id: text('id'), name: text('name') })).flush();
    return [201, { id: text('id') }];
  }
  if (req.method === 'POST' && req.url === '/orders') {
    if (!(await em.findOne(Customer, { id: text('customerId') }))) return [404, { error: 'unknown customer' }];
    return [202, await sagas.handle(orderSaga, { type: 'OrderPlaced', orderId: text('orderId'), customerId: text('customerId') })];
  }
  if (req.method === 'POST' && req.url === '/payments') {
    return [202, await sagas.handle(orderSaga, { type: 'PaymentReceived', orderId: text('orderId') })];
  }
  return [404, { error: 'not found' }];
}

async function respond(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const [status, body] = await route(req).catch((error: unknown): [number, unknown] =>
    error instanceof SagaError || error instanceof SyntaxError ? [400, { error: error.message }] : [500, { error: 'internal error' }],
  );
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

const server = createServer((req, res) => void respond(req, res));
server.listen(Number(process.env.PORT ?? 3_000), () => {
  dispatcher.start();
  log('listening', { port: (server.address() as AddressInfo).port });
});

process.once('SIGTERM', async () => {
  await new Promise((resolve) => server.close(resolve));
  await dispatcher.stop();
  await orm.close();
  log('stopped');
});
