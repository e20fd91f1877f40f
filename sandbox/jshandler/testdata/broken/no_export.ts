export const notAHandler = 1;
