// OpenAI error objects: {"error": {"message", "type", "param", "code"}}.

export type ApiErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'not_found_error'
  | 'service_unavailable_error'
  | 'server_error';

export interface OpenAIErrorBody {
  error: { message: string; type: ApiErrorType; param: string | null; code: string | null };
}

export class ApiError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
    readonly type: ApiErrorType = 'invalid_request_error',
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
  }

  toBody(): OpenAIErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export function badRequest(message: string, param: string | null = null, code: string | null = null): ApiError {
  return new ApiError(400, message, 'invalid_request_error', param, code);
}

export function unavailable(message: string): ApiError {
  return new ApiError(503, message, 'service_unavailable_error', null, 'service_unavailable');
}

export function unauthorized(): ApiError {
  return new ApiError(401, 'Incorrect or missing API key: send "Authorization: Bearer <key>".', 'authentication_error', null, 'invalid_api_key');
}

export function modelNotFound(model: string): ApiError {
  return new ApiError(404, `The model \`${model}\` does not exist.`, 'not_found_error', 'model', 'model_not_found');
}

interface FastifyLikeError {
  statusCode?: number;
  code?: string;
  message: string;
}

/** Any error thrown while serving a request -> (status, OpenAI body). Never a 500 for a client's mistake. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const e = err as FastifyLikeError;
  switch (e.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError(413, 'Request body is too large.', 'invalid_request_error', null, 'body_too_large');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return badRequest('Unsupported content type: send "Content-Type: application/json".', null, 'invalid_content_type');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return badRequest('Request body is empty: expected a JSON object.', null, 'invalid_json');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return badRequest(`Request body is not valid JSON: ${e.message}`, null, 'invalid_json');
  }
  if (err instanceof SyntaxError) return badRequest(`Request body is not valid JSON: ${err.message}`, null, 'invalid_json');
  const status = e.statusCode ?? 500;
  if (status >= 400 && status < 500) return new ApiError(status, e.message);
  return new ApiError(500, e.message || 'internal error', 'server_error');
}
