/** Every message has a string `type`; a saga's messages form a discriminated union on it. */
export interface SagaMessage {
  readonly type: string;
}

/** Any message with arbitrary data: the default type of the messages a saga sends. */
export interface AnyMessage extends SagaMessage {
  readonly [key: string]: unknown;
}

/** The member of the union `TMessage` whose `type` is `K`. */
export type MessageOfType<TMessage extends SagaMessage, K extends TMessage['type']> = Extract<TMessage, { type: K }>;
